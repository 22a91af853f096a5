/// \file
/// Triton compiles off the first call's path: the launch configurations a large kernel's
/// autotuning times (codegen/triton/triton_configs.h) other than its default compile on a thread
/// of their own, through the same compile hook, while the program already runs with the default
/// ones. A kernel takes its candidates at its first launch after they are done and times them
/// there (Note [Candidates compiled in the background], triton_runtime.cpp).
///
/// One thread per process, started at the first request and fed in order. The Python package
/// stops it at interpreter exit (stop_background_compiles, before the hooks' Python goes); a
/// forked child starts with no thread and an empty queue (the parent's requests stay undone in
/// it: its kernels keep their defaults).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/triton_runtime.h"

namespace ember::runtime {

/// One request: jobs in, one binary per job out (a binary with `error` set when the compiler
/// refused it, or when the request was dropped at exit). `binaries` is written once, before
/// `done` turns true; read it only after seeing `done` (acquire).
struct BackgroundCompile {
  std::vector<TritonCompileJob> jobs;
  std::vector<TritonBinary> binaries;
  std::atomic<bool> done{false};
};

/// Queues `jobs` for the background thread (the compile hook with background = true); an empty
/// request is done at once.
std::shared_ptr<const BackgroundCompile> compile_in_background(std::vector<TritonCompileJob> jobs);

/// Blocks until no request is queued or compiling, or `timeout_s` seconds pass (< 0: no limit);
/// true when none is left. Call it without the GIL (the thread needs it to compile).
bool finish_background_compiles(double timeout_s);

/// Drops the queued requests (each done, every binary an error), waits for the one compiling and
/// ends the thread. Without the GIL, at interpreter exit; a later request starts a new thread.
void stop_background_compiles();

/// Jobs queued since the process started, jobs whose request is done, and jobs not done yet.
struct BackgroundCompileStats {
  int64_t queued = 0;
  int64_t done = 0;
  int64_t pending = 0;
};
BackgroundCompileStats background_compile_stats();

}  // namespace ember::runtime
