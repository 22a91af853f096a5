/// \file
/// Binding entry points of ember._capture_core, one per area.
#pragma once

#include <nanobind/nanobind.h>

namespace ember::python {

void bind_bytecode(nanobind::module_& m);    ///< bind_bytecode.cpp
void bind_frame_hook(nanobind::module_& m);  ///< bind_frame_hook.cpp

}  // namespace ember::python
