/// \file
/// One bind function per C++ area; module.cpp calls them in order.
#pragma once

#include <nanobind/nanobind.h>

#include <exception>

namespace ember::python {

void bind_errors(nanobind::module_& m);
void bind_graph(nanobind::module_& m);
void bind_tracer(nanobind::module_& m);
void bind_runtime(nanobind::module_& m);
void bind_autograd(nanobind::module_& m);
void bind_capture(nanobind::module_& m);
void bind_codegen(nanobind::module_& m);

/// Sets the Python error for a C++ exception: ember's error tiers become ember.errors classes,
/// c10 errors the Python types torch uses, anything else RuntimeError. errors.cpp.
void set_python_error(const std::exception_ptr& p);

}  // namespace ember::python
