/// \file
/// Kernels over symbolic sizes (issue 35), the first class: a graph over shape symbols whose
/// nodes are all pointwise becomes one kernel whose loop extents, strides and offsets are
/// expressions over the kernel's size variables (loop::SizeVar, named after the graph's symbols
/// `s0`, `s1`, ...; the runtime passes their values at each launch). See docs/design/symbolic.md,
/// "Symbolic sizes in kernels".
#pragma once

#include <set>

#include "graph/graph.h"
#include "loop/expr.h"
#include "sched/fusion.h"

namespace ember::sched {

/// `e` as an i64 loop expression: symbols become SizeVars named as in `g.symbols`; their ids are
/// added to `used`. Python `//` and `%` become FloorDiv and Mod (the same semantics).
loop::Expr to_loop_expr(const sym::SymExpr& e, std::set<sym::SymbolId>& used);

/// The one kernel group of symbolic graph `g` when every node is pointwise and every output is
/// a node's output of one shape, contiguous: the kernel loops over that shape (extents from the
/// symbols; tails need nothing, every loop runs its exact extent), inlines every node once per
/// element, and reads each input at its own (symbolic) strides, broadcast where its size is the
/// constant 1. Loop kinds come from the symbols' hints (the outer loop is parallel when the hint
/// numel reaches options.parallel_threshold), so they never change results. `size_vars` lists
/// the symbols the kernel reads, in id order. Throws Unsupported ("schedule: <why>") for any other
/// graph. Deterministic: the same graph gives the same kernel.
KernelGroup schedule_symbolic_pointwise(const graph::Graph& g, const ScheduleOptions& options);

}  // namespace ember::sched
