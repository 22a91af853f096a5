/// \file
/// One bind function per C++ area; module.cpp calls them in order.
#pragma once

#include <nanobind/nanobind.h>

namespace ember::python {

void bind_errors(nanobind::module_& m);
void bind_graph(nanobind::module_& m);
void bind_tracer(nanobind::module_& m);
void bind_runtime(nanobind::module_& m);

}  // namespace ember::python
