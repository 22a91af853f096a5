/// \file
/// Symbolic shape rules: the sizes, strides and storage offsets of an op's results as
/// expressions over the graph's shape symbols (docs/design/symbolic.md, "Shape rules").
///
/// The tracer computes every result's metadata with torch's meta kernels at the symbols' hints
/// (fast, and right for every op); where an op reads a symbolic size or argument, these rules
/// give the same metadata as expressions. They are ember's own, one per class of op (pointwise
/// with broadcasting, reductions over dims, views, matrix products, factories, ...), plain C++
/// over graph types, so they are cheap and testable without torch.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "sym/guard.h"

namespace ember::graph {

/// The result types of `op` applied to `args` in graph `g` (whose `symbols` the types use).
/// `concrete` are the result types the meta kernel computed at the symbols' hints: their
/// count, dtypes, devices and requires_grad are taken as they are, and a result that is not a view
/// gets dense strides in the order of its concrete strides. Relations between sizes the rule must
/// decide (broadcasting `s0` against `s1`, a split's number of pieces) go through `guards`.
///
/// Guarantees: the returned types have the sizes, strides and offsets of `concrete` when every
/// symbol is bound to its hint (checked: a rule that disagrees with the meta kernel throws
/// Unsupported naming the op and both types, so the caller falls back to static shapes);
/// constant sizes stay constants.
///
/// Throws Unsupported when `op` has no rule (`"<op> has no symbolic shape rule"`).
/// `pointwise`: ATen tags the op pointwise (torch's own classification, for ops outside ember's
/// table such as masked_fill): its results broadcast its tensor arguments.
/// `slots`: the schema result each of `concrete` is (an op whose results may be undefined, as
/// a backward op's under its output mask, has types for the defined ones only); empty: result i
/// is slot i.
std::vector<TensorType> symbolic_result_types(const Graph& g, const OpInfo& op,
                                              const std::vector<Arg>& args,
                                              const std::vector<TensorType>& concrete,
                                              sym::GuardRecorder& guards, bool pointwise = false,
                                              const std::vector<int32_t>& slots = {});

/// The int results of `op` applied to `args` (its results that are not tensors, in order) as
/// expressions over `g`'s symbols, for ops whose ints are sizes of their arguments: the lengths
/// that CUDA's flash and cuDNN attention return (the query's and the key's dim 2, which their
/// backward ops take). `concrete` are the ints the meta kernel returned at the symbols' hints.
///
/// Guarantees: each result has its concrete value at the hints (checked). Throws Unsupported
/// (`"<op> returns an int computed from symbolic sizes"`) for any other op, or a disagreement.
std::vector<DimExpr> symbolic_int_results(const Graph& g, const OpInfo& op,
                                          const std::vector<Arg>& args,
                                          const std::vector<int64_t>& concrete);

/// Dense strides for `sizes` in the dimension order of `like` (the strides of a dense tensor of
/// the same rank at the hints): contiguous when `like` is, otherwise innermost first by
/// increasing stride, as torch lays out a result that keeps its input's layout.
Dims dense_strides_like(const Dims& sizes, const Dims& like);

}  // namespace ember::graph
