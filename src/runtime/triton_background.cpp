#include "runtime/triton_background.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "support/error.h"

namespace ember::runtime {

namespace {

struct State {
  std::mutex mu;
  std::condition_variable work;  // a request arrived, or stop
  std::condition_variable idle;  // a request is done
  std::deque<std::shared_ptr<BackgroundCompile>> queue;
  bool busy = false;  // the thread is compiling a request
  bool stopping = false;
  std::thread thread;
  int64_t queued = 0;
  int64_t done = 0;
};

// Never destroyed (the thread may outlive static teardown when the interpreter was not finalized
// normally); a forked child replaces it, since the parent's thread and lock state do not carry
// over.
std::atomic<State*> g_state{nullptr};

void forget_in_child() {
  g_state.store(new State(), std::memory_order_release);
}

State& state() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_state.store(new State(), std::memory_order_release);
    pthread_atfork(nullptr, nullptr, forget_in_child);
  });
  return *g_state.load(std::memory_order_acquire);
}

void finish(BackgroundCompile& r, std::vector<TritonBinary> binaries, const std::string& error) {
  if (binaries.size() != r.jobs.size()) {
    binaries.assign(r.jobs.size(), TritonBinary{});
    for (TritonBinary& b : binaries) b.error = error.empty() ? "no binary" : error;
  }
  r.binaries = std::move(binaries);
  r.done.store(true, std::memory_order_release);
}

void run(State* s) {
  for (;;) {
    std::shared_ptr<BackgroundCompile> r;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->work.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
      if (s->queue.empty()) return;  // stopping, nothing queued
      r = std::move(s->queue.front());
      s->queue.pop_front();
      s->busy = true;
    }
    std::vector<TritonBinary> binaries;
    std::string error;
    try {
      binaries = triton_hooks().compile(r->jobs, /*background=*/true);
    } catch (const std::exception& e) {  // the kernels keep their defaults
      error = std::string("background compile: ") + e.what();
    }
    finish(*r, std::move(binaries), error);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->busy = false;
      s->done += static_cast<int64_t>(r->jobs.size());
    }
    s->idle.notify_all();
  }
}

}  // namespace

std::shared_ptr<const BackgroundCompile> compile_in_background(std::vector<TritonCompileJob> jobs) {
  auto r = std::make_shared<BackgroundCompile>();
  r->jobs = std::move(jobs);
  if (r->jobs.empty()) {
    r->done.store(true, std::memory_order_release);
    return r;
  }
  EMBER_INTERNAL_ASSERT(triton_hooks().compile != nullptr) << "no Triton compile hook";
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = false;
    if (!s.thread.joinable()) s.thread = std::thread(run, &s);
    s.queued += static_cast<int64_t>(r->jobs.size());
    s.queue.push_back(r);
  }
  s.work.notify_one();
  return r;
}

bool finish_background_compiles(double timeout_s) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  auto none_left = [&] { return s.queue.empty() && !s.busy; };
  if (timeout_s < 0) {
    s.idle.wait(lock, none_left);
    return true;
  }
  return s.idle.wait_for(lock, std::chrono::duration<double>(timeout_s), none_left);
}

void stop_background_compiles() {
  State& s = state();
  std::thread thread;
  std::deque<std::shared_ptr<BackgroundCompile>> dropped;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = true;
    dropped.swap(s.queue);
    thread = std::move(s.thread);
  }
  for (const auto& r : dropped) {
    finish(*r, {}, "not compiled: the process is exiting");
    std::lock_guard<std::mutex> lock(s.mu);
    s.done += static_cast<int64_t>(r->jobs.size());
  }
  s.work.notify_all();
  if (thread.joinable()) thread.join();
  s.idle.notify_all();
}

BackgroundCompileStats background_compile_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return {s.queued, s.done, s.queued - s.done};
}

}  // namespace ember::runtime
