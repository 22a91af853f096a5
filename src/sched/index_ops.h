/// \file
/// Index functions of view, layout and indexing ops: the value of an output element at an index,
/// as a loop-IR expression of input elements at other indices (Inductor's `inner_fn` for these
/// ops). The group builder (fusion.cpp) inlines them into their consumers; this file knows only
/// the ops and reads its inputs through an `ElementReader` the builder implements.
///
/// Two kinds of op:
///  - **views** (view, permute, slice, expand, ...): the output aliases the input's memory. Their
///    index function remaps the index and reads the input; a view of a realized buffer can also be
///    read directly at the view's traced geometry (fusion.cpp does that).
///  - **computing** ops (cat, flip, constant_pad_nd, gather, ...): the output is a new tensor
///    whose elements are input elements (possibly converted to the output dtype) or constants.
///
/// Index math is written with loop::Expr over the traced sizes (constants today), so symbolic
/// sizes only change where the sizes come from. See docs/design/scheduler.md.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.h"
#include "loop/expr.h"

namespace ember::sched {

/// An index into a tensor value: one i64 expression per dim, each in [0, size of that dim).
using Index = std::vector<loop::Expr>;

enum class IndexOpKind : uint8_t {
  View,     ///< the output aliases the input's memory (its first tensor argument)
  Compute,  ///< the output is a new tensor
};

/// How an index function reads its tensor arguments. Implemented by the group builder.
class ElementReader {
 public:
  virtual ~ElementReader() = default;
  /// The element of tensor value `v` at `index` (one expression per dim of v), in v's loop
  /// dtype. `guarded`: the read sits in one arm of a Select and is evaluated only where that arm
  /// is chosen; elsewhere `index` may be out of range, so the read must not be hoisted.
  virtual loop::Expr element(graph::ValueId v, const Index& index, bool guarded) = 0;
  /// Element `index` of the integer index tensor `v`, as an i64 index into a dim of size `size`.
  /// The builder checks, before the kernel's loops, that every element of `v` lies in
  /// [-size, size) when `negative_wraps` (and then wraps negative ones by adding `size`), else in
  /// [0, size); the kernel reports out-of-range indices instead of reading out of bounds. `v`
  /// must be one of index_tensor_args().
  virtual loop::Expr index_element(graph::ValueId v, const Index& index, const loop::Expr& size,
                                   bool negative_wraps) = 0;
};

/// The kind of `n` when it has an index function that lower_index_op supports with these
/// arguments, dtypes and sizes; nullopt otherwise (the node then stays an ATen call).
/// Conservative, never throws for a verifier-valid graph. Does not check devices. Supported:
///  - views: view, _unsafe_view, alias, detach, permute, transpose.int, t, expand, squeeze (all
///    overloads), unsqueeze, slice.Tensor, select.int, narrow, diagonal, split.Tensor,
///    split_with_sizes, unbind.int, as_strided (only through its traced geometry: its input must
///    be realized, see needs_realized_input); over shape symbols, every one of these but
///    as_strided, only through its traced geometry too;
///  - computing: cat, stack, flip, roll, constant_pad_nd, im2col, repeat, tril, triu, copy,
///    fill.Scalar, fill.Tensor, slice_scatter, select_scatter, index_select, gather, embedding,
///    index.Tensor
///    (integer index tensors, the indexed dims adjacent); output 0 of native_batch_norm with
///    training=False and _native_batch_norm_legit_no_training (batch_norm.h).
std::optional<IndexOpKind> index_op_kind(const graph::Graph& g, const graph::Node& n);

/// The tensor arguments of `n` whose elements are used as indices (index_select's index,
/// gather's index, embedding's indices, index.Tensor's indices). They must be realized before the
/// kernel that reads them, which checks their range first. Empty for other ops.
std::vector<graph::ValueId> index_tensor_args(const graph::Graph& g, const graph::Node& n);

/// True when `n`'s index function exists only as a read of its input's memory at the output's
/// traced geometry (as_strided, and views over shape symbols), so its input must be realized.
bool needs_realized_input(const graph::Graph& g, const graph::Node& n);

/// The input a view op aliases (its first tensor argument). Requires index_op_kind == View.
graph::ValueId view_input(const graph::Graph& g, const graph::Node& n);

/// The element of output `out` of node `n` at `index`, reading inputs through `reader`. Requires
/// index_op_kind(g, n) and !needs_realized_input(g, n) (an internal error otherwise). The result
/// has the loop dtype of `out`.
loop::Expr lower_index_op(const graph::Graph& g, const graph::Node& n, graph::ValueId out,
                          const Index& index, ElementReader& reader);

}  // namespace ember::sched
