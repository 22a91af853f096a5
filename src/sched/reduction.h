/// \file
/// Reductions as generated kernels: softmax, log_softmax, layer_norm and the plain reductions
/// (sum, mean, amax, amin). Each such node is its own kernel group (see fusion.h); this file
/// decides which nodes qualify and builds their loop-IR kernels. See docs/design/scheduler.md for
/// the numerics.
#pragma once

#include <string>

#include "graph/graph.h"
#include "loop/stmt.h"
#include "sched/fusion.h"

namespace ember::sched {

/// True when node `n` of `g` can run as a generated reduction kernel:
///  - aten::_softmax / aten::_log_softmax over any one dim, half_to_float false, f32/f64/bf16
///    (bf16 computed in f32, as eager);
///  - aten::native_layer_norm over trailing dims, f32/f64, weight and bias absent or of the
///    input's dtype;
///  - aten::sum.dim_IntList, aten::mean.dim, aten::amax, aten::amin over trailing dims (or all;
///    also aten::sum and aten::mean of every element),
///    keepdim either way, f32/f64, dtype argument None or the output's dtype.
/// Every tensor must be on the CPU with a non-empty input. Conservative: when unsure it returns
/// false (the node then runs as an ATen call). Never throws for a verifier-valid graph.
bool is_reduction_kernel_node(const graph::Graph& g, const graph::Node& n);

/// The kernel of the one-node group `group` (nodes = {n}): buffers are group.inputs then
/// group.outputs (a subset of n's outputs, those needed), read and written at their traced
/// strides. Outer loops run over the kept dims (the first one of extent > 1 is parallel from
/// options.parallel_threshold input elements); each iteration initialises its own accumulators.
/// Requires is_reduction_kernel_node(g, n) and a non-empty group.outputs.
loop::Kernel build_reduction_kernel(const graph::Graph& g, const graph::Node& n,
                                    const KernelGroup& group, const std::string& name,
                                    const ScheduleOptions& options);

}  // namespace ember::sched
