/// \file
/// A traced graph as a torch.fx.GraphModule, for backends other than ember's compiler behind
/// ember's capture (ember.compile(backend=...), graph_runner.h). The module is built node by
/// node (no FX tracing, no proxies, no fake tensors) and computes what the Executor computes for
/// the graph:
///  - placeholders: the graph's non-constant inputs, in order (the tensors Executor::run takes),
///    named after their sources (`L['x']` -> `l_x`);
///  - get_attr: the graph's constants, buffers of the module named `_tensor_constant<i>`, except
///    wrapped numbers (Python scalars an op took as tensors) that nodes only read as tensor
///    arguments: those are written as the scalars (`aten.mul.Tensor(x, 2)`), as torch's graphs
///    have them, which keeps a scalar's type promotion;
///  - call_function: one per node, its target `torch.ops.<namespace>.<name>.<overload>`
///    (`.default` for the default overload); every argument the graph holds (defaults filled
///    in), positional except the schema's keyword-only ones, which are keywords; tensor results
///    through `operator.getitem` when the overload returns a tuple or a list;
///  - input mutations: `aten.copy_.default(input, value)` after the last node, in the graph's
///    order (as the Executor applies them);
///  - output: the tuple of the graph's outputs. An output that is a graph input is that
///    placeholder (so it is returned after its mutation, as in eager).
#pragma once

#include <nanobind/nanobind.h>

#include "tracer/trace_session.h"

namespace ember::capture {

/// The GraphModule of `traced` (see the file comment). Throws Unsupported for an operator that is
/// not registered in this process, or whose tensor results cannot be addressed from Python (a
/// tensor list followed by other tensor results).
nanobind::object to_graph_module(const tracer::TracedGraph& traced);

}  // namespace ember::capture
