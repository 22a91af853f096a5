/// \file
/// Host time per kind of executor step, summed over the process: what the C++ call path costs
/// per launch (issue 40's "the C++ call path's cost per kernel measured and reported"). Off
/// unless a graph was compiled with CompileOptions::Debug::host_step_times
/// (EMBER_HOST_STEP_TIMES=1): then each of its runs reads the steady clock around every step
/// and around the whole run.
///
///   kernel   a generated kernel's step: argument setup and the launch (Triton's cuLaunchKernel, or
///            the C++ kernel's whole run on the CPU), the parameter cache's check
///   extern   an ATen call through the dispatcher (boxed), the op's own host work included:
///            cuDNN's and cuBLAS's calls, their allocations
///   matmul   a matrix product run by a template or decided by timing (executor_matmul.cpp)
///   view     a view made from its root's storage
///   run      Executor::run as a whole: the steps, and what surrounds them (the environment, the
///            arena, mutations written back, outputs)
///   guards   a compiled frame's check before its call under ember.compile: reading its guards'
///            sources and checking them (capture/compile/compiled_frame.h), outside the run
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::runtime {

enum class HostStep : int { Kernel = 0, Extern, Matmul, View, Run, Guards };
constexpr int kNumHostSteps = 6;

/// Adds one step of `kind` that took `nanos` of host time.
void record_host_step(HostStep kind, int64_t nanos);

struct HostStepTotal {
  std::string kind;
  int64_t count = 0;
  double seconds = 0;
};
/// The totals since the last reset, one per kind in HostStep's order.
std::vector<HostStepTotal> host_step_times();
void reset_host_step_times();

/// Times the scope as one step of `kind`. Does nothing when `on` is false. A run inside a run on
/// the same thread (one handed over to the specialization of its sizes, or to the unfused
/// program) is not counted again: its time is the outer run's.
class HostStepClock {
 public:
  HostStepClock(bool on, HostStep kind);
  ~HostStepClock();
  HostStepClock(const HostStepClock&) = delete;
  HostStepClock& operator=(const HostStepClock&) = delete;

 private:
  bool on_;
  bool counted_ = false;  // a run: counted in the thread's runs in progress
  HostStep kind_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ember::runtime
