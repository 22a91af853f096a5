#include "runtime/host_times.h"

#include <atomic>

namespace ember::runtime {

namespace {

struct Totals {
  std::array<std::atomic<int64_t>, kNumHostSteps> count{};
  std::array<std::atomic<int64_t>, kNumHostSteps> nanos{};
};

Totals& totals() {
  static Totals t;
  return t;
}

constexpr std::array<const char*, kNumHostSteps> kNames = {"kernel", "extern", "matmul",
                                                           "view",   "run",    "guards"};

thread_local int runs_in_progress = 0;

}  // namespace

HostStepClock::HostStepClock(bool on, HostStep kind) : on_(on), kind_(kind) {
  if (!on_) return;
  if (kind_ == HostStep::Run) {
    counted_ = true;
    if (runs_in_progress++ > 0) {  // inside another run: its time is that run's
      on_ = false;
      return;
    }
  }
  start_ = std::chrono::steady_clock::now();
}

HostStepClock::~HostStepClock() {
  if (counted_) --runs_in_progress;
  if (!on_) return;
  const auto dt = std::chrono::steady_clock::now() - start_;
  record_host_step(kind_, std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count());
}

void record_host_step(HostStep kind, int64_t nanos) {
  const auto i = static_cast<size_t>(kind);
  totals().count[i].fetch_add(1, std::memory_order_relaxed);
  totals().nanos[i].fetch_add(nanos, std::memory_order_relaxed);
}

std::vector<HostStepTotal> host_step_times() {
  std::vector<HostStepTotal> out;
  for (size_t i = 0; i < kNumHostSteps; ++i) {
    out.push_back({kNames[i], totals().count[i].load(std::memory_order_relaxed),
                   static_cast<double>(totals().nanos[i].load(std::memory_order_relaxed)) * 1e-9});
  }
  return out;
}

void reset_host_step_times() {
  for (size_t i = 0; i < kNumHostSteps; ++i) {
    totals().count[i].store(0, std::memory_order_relaxed);
    totals().nanos[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace ember::runtime
