/// \file
/// The ember._C extension module. Binding order: errors first (every later area may raise them),
/// then the graph, the tracer (which registers its dispatcher kernels) and the runtime.
#include "python/bindings.h"

NB_MODULE(_C, m) {
  m.doc() = "ember's C++ core";
  // Dynamo's caches still hold compiled graphs when the interpreter exits; that is not a leak.
  nanobind::set_leak_warnings(false);
  ember::python::bind_errors(m);
  ember::python::bind_graph(m);
  ember::python::bind_tracer(m);
  ember::python::bind_runtime(m);
  ember::python::bind_autograd(m);
  ember::python::bind_capture(m);
  ember::python::bind_codegen(m);
}
