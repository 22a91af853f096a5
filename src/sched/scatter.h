/// \file
/// Writes at data-dependent positions as generated kernels: scatter, scatter_add, scatter_reduce,
/// index_put, index_add, index_copy, index_fill. They are not index functions (an output element
/// depends on which source elements land on it), so each is a one-node kernel group (fusion.h):
/// the kernel checks every index, copies `self` into the output, then runs a **serial** loop over
/// the source elements that stores (or accumulates) each one at its indexed position. Serial
/// means deterministic and equal to CPU eager's order for duplicates: the last write wins, and
/// accumulations add in source order. See docs/design/scheduler.md ("Scatter kernels").
#pragma once

#include <string>

#include "graph/graph.h"
#include "loop/stmt.h"
#include "sched/fusion.h"

namespace ember::sched {

/// True when node `n` of `g` runs as a generated scatter kernel. The overloads:
///  - aten::scatter.src, scatter.value, scatter_add, scatter.reduce and scatter.value_reduce
///    (reduce "add" / "multiply"), scatter_reduce.two (reduce "sum", "prod", "amax", "amin",
///    include_self either way);
///  - aten::index_put (integer index tensors on adjacent dims, accumulate either way),
///    index_add (alpha 1, or an integer alpha of integers), index_copy, index_fill.int_Scalar.
/// Every tensor on the CPU with constant sizes and strides and a loop-IR dtype, self of rank >= 1;
/// index tensors of int64 (and int32 where eager takes them); the source of self's dtype;
/// accumulation only for numeric dtypes. Conservative: false where unsure (the node then runs as an
/// ATen call); never throws for a verifier-valid graph.
bool is_scatter_kernel_node(const graph::Graph& g, const graph::Node& n);

/// The kernel of the one-node group `group` (nodes = {n}, inputs = every tensor `n` reads, in
/// argument order and without repeats, outputs = {n's output}). Sets group.kernel and
/// group.index_status (the kernel checks its indices first, see KernelGroup). Requires
/// is_scatter_kernel_node(g, n).
void build_scatter_kernel(const graph::Graph& g, const graph::Node& n, KernelGroup& group,
                          const std::string& name, const ScheduleOptions& options);

}  // namespace ember::sched
