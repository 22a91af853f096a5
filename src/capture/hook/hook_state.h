/// \file
/// Internal to the frame hook: the per-thread state that CompiledFunction sets and the eval
/// function reads. Not part of the contract in frame_hook.h.
///
/// Thread model: the eval function is installed interpreter-wide while at least one thread is
/// inside a CompiledFunction call, and put back (to whatever was installed before) when the last
/// one leaves; outside compiled calls Python runs with CPython's own evaluator at full speed. A
/// thread whose state has no active compiler passes every frame to the previous evaluator.
#pragma once

#include <Python.h>

#include <memory>

#include "capture/hook/frame_hook.h"

namespace ember::capture::detail {

struct ThreadState {
  /// The compiler of the innermost CompiledFunction call on this thread; nullptr while the hook is
  /// disabled on the thread (no compiled call, or a compile()/check() is running). Points into the
  /// CompiledFunction object, which the call keeps alive.
  const std::shared_ptr<FrameCompiler>* compiler = nullptr;
  /// The code object that is eligible even where the skip rules exclude it; borrowed.
  PyObject* top_code = nullptr;
  /// Nesting depth of CompiledFunction calls on this thread.
  int depth = 0;
};

inline thread_local ThreadState thread_state;

/// Called when a thread enters its outermost / leaves its outermost compiled call: counts active
/// threads and installs / uninstalls the eval function. GIL held.
void activate_thread();
void deactivate_thread();

}  // namespace ember::capture::detail
