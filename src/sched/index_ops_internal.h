/// \file
/// Internals of the index functions (index_ops.h), shared by index_ops.cpp (the rule table's
/// dispatch and the public entry points) and the files that fill the table by family:
/// index_ops_views.cpp, index_ops_layout.cpp, index_ops_factories.cpp, index_ops_indexing.cpp.
/// Not part of the sched API.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "loop/expr.h"
#include "sched/index_ops.h"
#include "sched/kernel_params.h"

namespace ember::sched::index_detail {

using graph::OpKind;
using graph::ValueId;
using loop::DType;
using loop::Expr;

// One node and its schema, with typed access to its arguments.
struct Ctx {
  const graph::Graph& g;
  const graph::Node& n;
  const graph::OpInfo& op;

  const graph::Arg* arg(std::string_view name) const {
    for (size_t i = 0; i < op.arg_names.size() && i < n.args.size(); ++i) {
      if (op.arg_names[i] == name) return &n.args[i];
    }
    return nullptr;
  }
  std::optional<int64_t> int_arg(std::string_view name) const {
    const graph::Arg* a = arg(name);
    const auto* v = a ? std::get_if<int64_t>(a) : nullptr;
    return v ? std::optional<int64_t>(*v) : std::nullopt;
  }
  const std::vector<int64_t>* ints_arg(std::string_view name) const {
    const graph::Arg* a = arg(name);
    return a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
  }
  std::optional<ValueId> tensor_arg(std::string_view name) const {
    const graph::Arg* a = arg(name);
    const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
    return r ? std::optional<ValueId>(r->id) : std::nullopt;
  }
  bool is_none(std::string_view name) const {
    const graph::Arg* a = arg(name);
    return a != nullptr && std::holds_alternative<graph::NoneArg>(*a);
  }
  const graph::TensorType& type(ValueId v) const { return g.type(v); }
  std::vector<int64_t> sizes(ValueId v) const { return sizes_of(g.type(v)); }
  ValueId self() const { return *tensor_arg("self"); }
  ValueId out() const { return n.outputs[0]; }
  /// The result position of output `k` among the op's tensor results.
  int32_t slot(size_t k) const {
    return n.result_slots.empty() ? static_cast<int32_t>(k) : n.result_slots[k];
  }
};

/// Wraps a possibly negative dim into [0, rank); rank 0 accepts -1 and 0 (as torch's
/// maybe_wrap_dim with wrap_scalar).
std::optional<int64_t> wrap_dim(int64_t d, int64_t rank);
/// Every dim of `dims` is valid for a rank-`rank` tensor and named once (after wrapping).
bool distinct_dims(const std::vector<int64_t>& dims, int64_t rank);
/// True when `t` has a loop-IR dtype; ldt is that dtype.
bool loop_dtype(const graph::TensorType& t);
DType ldt(const graph::TensorType& t);
/// The row-major linear position of `index` in `sizes`.
Expr linearize(const Index& index, const std::vector<int64_t>& sizes);
/// The index of row-major linear position `lin` in `sizes` (every size >= 1).
Index delinearize(const Expr& lin, const std::vector<int64_t>& sizes);
int64_t numel(const std::vector<int64_t>& s);

// `v` with `value` inserted at position `dim`.
template <typename T, typename V>
std::vector<T> insert(std::vector<T> v, size_t dim, V value) {
  v.insert(v.begin() + static_cast<std::ptrdiff_t>(dim), T(std::move(value)));
  return v;
}
// `v` without position `dim`.
template <typename T>
std::vector<T> erase(std::vector<T> v, size_t dim) {
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(dim));
  return v;
}

/// The element of `v` converted to `t` as eager's copy_ does it.
Expr convert(DType t, Expr e);
/// `value` (a bool, int or double argument) converted to `t` as `Scalar::to<T>()` does, or
/// nullopt where that conversion raises (an integer that does not fit) or is not exact to
/// reproduce.
std::optional<Expr> scalar_constant(DType t, const graph::Arg* value);
Expr zero_of(DType t);
/// torch's slice bounds: (start, length) of self.slice(dim, start, end, step) on a dim of `size`.
std::optional<std::pair<int64_t, int64_t>> slice_range(const Ctx& c, int64_t size);
/// An index tensor's dtype: int64 or int32.
bool index_dtype(const graph::TensorType& t);
/// Right-aligned broadcast of `index` (of shape `out`) to a tensor of sizes `in`.
Index broadcast_index(const Index& index, const std::vector<int64_t>& in);
bool broadcasts_to(const std::vector<int64_t>& in, const std::vector<int64_t>& out);
/// The same over sizes that may be symbolic: a dim broadcasts only where its size is the
/// constant 1 (a symbolic size is never 1), else it must equal the output's.
Index broadcast_index(const Index& index, const graph::Dims& in);
bool broadcasts_to(const graph::Dims& in, const graph::Dims& out);

/// aten::index.Tensor and index_put: the indexed dims, the broadcast shape of the index tensors,
/// and where the broadcast dims sit in the output.
struct AdvancedIndex {
  std::vector<std::optional<ValueId>> indices;  ///< per self dim (trailing dims: none)
  std::vector<int64_t> bshape;
  size_t first = 0;  ///< first indexed dim (the broadcast dims replace the indexed dims there)
  size_t last = 0;   ///< one past the last indexed dim
};
/// The index tensors of argument "indices": integer (int64, int32) CPU tensors on adjacent dims
/// [first, last) of self, broadcastable together; nullopt otherwise.
std::optional<AdvancedIndex> advanced_index(const Ctx& c);
/// The same over sizes that may be symbolic: the broadcast shape as size expressions (a dim
/// broadcasts only where its size is the constant 1, as broadcasts_to over Dims).
struct SymbolicAdvancedIndex {
  std::vector<std::optional<ValueId>> indices;
  graph::Dims bshape;
  size_t first = 0, last = 0;
};
std::optional<SymbolicAdvancedIndex> symbolic_advanced_index(const Ctx& c);

// ---- the table ----

using Check = std::function<bool(const Ctx&)>;
/// The element of output `k` (its position in n.outputs) at `index`.
using Lower = std::function<Expr(const Ctx&, size_t k, const Index&, ElementReader&)>;

struct Rule {
  IndexOpKind kind;
  Check check;
  Lower lower;  // empty: only through the traced geometry (as_strided)
  /// For a node over shape symbols (Note [Views over shape symbols]): whether `lower` holds for
  /// it (it reads no size as a number, or reads sizes as expressions). Empty: never; a view is
  /// read at its traced geometry, a computing op is an ATen call.
  Check symbolic = {};
};
using RuleTable = std::map<graph::OpOverload, Rule>;

/// Views and computing ops that read `self` at a remapped index of the same dtype.
Expr read_self(const Ctx& c, ElementReader& r, const Index& idx);
/// `self` has a loop dtype and every output has its dtype.
bool same_dtype_view(const Ctx& c);

/// The families of the table, one file each.
void add_view_rules(RuleTable& t);      ///< index_ops_views.cpp
void add_layout_rules(RuleTable& t);    ///< index_ops_layout.cpp: cat, flip, pad, scatters, ...
void add_factory_rules(RuleTable& t);   ///< index_ops_factories.cpp: full, zeros, arange, ...
void add_indexing_rules(RuleTable& t);  ///< index_ops_indexing.cpp: index tensors

}  // namespace ember::sched::index_detail
