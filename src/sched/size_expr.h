/// \file
/// Sizes over shape symbols in kernels (issue 35, docs/design/symbolic.md): a graph's size,
/// stride or offset expression as a loop expression over the kernel's size variables
/// (loop::SizeVar, named after the graph's symbols `s0`, `s1`, ...; the runtime passes their
/// values at each launch), and which size variables a kernel reads.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "loop/expr.h"
#include "loop/stmt.h"

namespace ember::sched {

/// `e` as an i64 loop expression: symbols become SizeVars named as in the graph's symbols; their
/// ids are added to `used`. Python `//` and `%` become FloorDiv and Mod (the same semantics).
loop::Expr to_loop_expr(const sym::SymExpr& e, std::set<sym::SymbolId>& used);

/// `d` as an i64 loop expression: an IntImm when constant, else to_loop_expr.
loop::Expr dim_expr(const graph::DimExpr& d);

/// The size variables kernel `k` reads (its body's and its buffers' sizes and strides), as
/// loop::Kernel::size_vars wants them: the symbols' names, in symbol id order of `symbols`.
std::vector<std::string> kernel_size_vars(const loop::Kernel& k, const sym::ShapeEnv& symbols);

/// The product of `sizes` at the symbols' hints: for heuristics only (how many elements a kernel
/// runs over, which loop is parallel), never for what a kernel computes.
int64_t hint_numel(const graph::Dims& sizes, const sym::ShapeEnv& symbols);

/// Whether `d` is the constant `v` (a symbolic size never is one, whatever its hint: 0/1
/// specialization gives symbols a range from 2, and an expression that happens to equal `v` at
/// some call is not known to).
inline bool is_constant(const graph::DimExpr& d, int64_t v) {
  return d.is_constant() && d.constant() == v;
}

/// `d` at the symbols' hints (heuristics only, as hint_numel).
int64_t hint_of(const graph::DimExpr& d, const sym::ShapeEnv& symbols);

/// The elements a kernel over `sizes` may run over, for the choice of a parallel loop: the
/// product itself when constant, else the largest the symbols' ranges allow (INT64_MAX when
/// unbounded). Not the hint: a kernel compiled at a small size (the first call of a frame) runs
/// at every larger one, where a serial loop would leave cores idle (Note [Parallel loops over
/// symbols] in size_expr.cpp).
int64_t largest_numel(const graph::Dims& sizes, const sym::ShapeEnv& symbols);

/// The run-time condition of a parallel loop chosen by largest_numel, for a kernel whose work is
/// `work` elements: `threshold <= work` (loop::For::parallel_when), or undefined when `work` is a
/// constant (decided at compile time) or never below `threshold`.
loop::Expr parallel_when(const graph::DimExpr& work, int64_t threshold,
                         const sym::ShapeEnv& symbols);

}  // namespace ember::sched
