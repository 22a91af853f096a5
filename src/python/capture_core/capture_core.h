/// \file
/// Binding entry points of ember._capture_core, one per area.
#pragma once

#include <nanobind/nanobind.h>

#include "capture/hook/frame_hook.h"

namespace ember::python {

void bind_bytecode(nanobind::module_& m);    ///< bind_bytecode.cpp
void bind_frame_hook(nanobind::module_& m);  ///< bind_frame_hook.cpp

/// capture::hook_stats() as a dict (both modules that bind the hook return it).
inline nanobind::dict hook_stats_dict() {
  capture::HookStats s = capture::hook_stats();
  nanobind::dict d;
  d["frames_seen"] = s.frames_seen;
  d["cache_hits"] = s.cache_hits;
  d["compiles"] = s.compiles;
  d["recompiles"] = s.recompiles;
  d["eager_frames"] = s.eager_frames;
  d["cache_limit_hits"] = s.cache_limit_hits;
  return d;
}

}  // namespace ember::python
