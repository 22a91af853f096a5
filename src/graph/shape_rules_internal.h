/// \file
/// What the symbolic shape rules' source files share (shape_rules.cpp: the ops of ember's table;
/// shape_rules_by_name.cpp: ops outside it, by name, and backward ops). Not part of the graph
/// library's API.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/shape_rules.h"
#include "support/error.h"
#include "sym/guard.h"
#include "sym/simplify.h"

namespace ember::graph::shape_rules_detail {

using sym::Rel;

/// One op call being typed.
struct Call {
  const Graph& g;
  const OpInfo& op;
  const std::vector<Arg>& args;
  const std::vector<TensorType>& concrete;
  sym::GuardRecorder& guards;
  bool pointwise_tag = false;
  const std::vector<int32_t>& slots;  ///< the schema result of each concrete type (empty: i)

  std::string name() const { return op.qualified_name(); }

  const Arg* named(std::string_view n) const {
    for (size_t i = 0; i < op.arg_names.size() && i < args.size(); ++i) {
      if (op.arg_names[i] == n) return &args[i];
    }
    return nullptr;
  }
  const Arg& at(size_t i) const {
    EMBER_INTERNAL_ASSERT(i < args.size()) << name() << ": no argument " << i;
    return args[i];
  }
  const TensorType* tensor_or_null(const Arg& a) const {
    const auto* r = std::get_if<ValueRef>(&a);
    return r ? &g.type(r->id) : nullptr;
  }
  const TensorType& tensor(size_t i) const {
    const TensorType* t = tensor_or_null(at(i));
    EMBER_INTERNAL_ASSERT(t != nullptr) << name() << ": argument " << i << " is not a tensor";
    return *t;
  }
  DimExpr dim(const Arg& a) const {
    std::optional<DimExpr> d = dim_arg(a);
    EMBER_INTERNAL_ASSERT(d.has_value()) << name() << ": expected an int argument";
    return *d;
  }
  /// An int argument the rule needs as a number (a dimension index, a step): a symbolic one is
  /// specialized to its hint, with a guard.
  int64_t integer(const Arg& a) const { return guards.specialize(dim(a).expr()); }
  Dims dims(const Arg& a) const {
    std::optional<Dims> d = dims_arg(a);
    EMBER_INTERNAL_ASSERT(d.has_value()) << name() << ": expected an int list argument";
    return *d;
  }
  bool decide(const DimExpr& a, Rel rel, const DimExpr& b) const {
    if (a.is_constant() && b.is_constant()) {
      return sym::relation_holds(a.constant(), rel, b.constant());
    }
    return guards.decide(a.expr(), rel, b.expr());
  }
  /// Requires `a == b` (an op's operands that must agree: a product's inner sizes, a norm's
  /// width against its weight), deciding it through a guard: the trace saw them equal, and the
  /// guard keeps every reuse so (a symbol equal to a constant is pinned to it).
  void require_equal(const DimExpr& a, const DimExpr& b, const char* what) const {
    if (a == b) return;
    EMBER_UNSUPPORTED(decide(a, Rel::EQ, b))
        << name() << ": " << what << " " << a.str() << " and " << b.str() << " differ";
  }
  DimExpr simplify(const DimExpr& d) const {
    return d.is_constant() ? d : DimExpr(sym::simplify(d.expr(), g.symbols));
  }
  /// A result that is a new tensor: dense strides in the order of result `i`'s concrete ones.
  TensorType fresh(size_t i, Dims sizes) const {
    EMBER_INTERNAL_ASSERT(i < concrete.size())
        << name() << ": result " << i << " of " << concrete.size();
    TensorType t = concrete[i];
    t.strides = dense_strides_like(sizes, concrete[i].strides);
    t.sizes = std::move(sizes);
    t.storage_offset = 0;
    return t;
  }
  /// Results whose sizes are `per_slot[k]` for schema result k (the defined ones, in order); a
  /// slot with none keeps its concrete type.
  std::vector<TensorType> by_slot(const std::vector<std::optional<Dims>>& per_slot) const {
    std::vector<TensorType> out;
    for (size_t i = 0; i < concrete.size(); ++i) {
      const size_t k = slots.empty() ? i : static_cast<size_t>(slots[i]);
      out.push_back(k < per_slot.size() && per_slot[k] ? fresh(i, *per_slot[k]) : concrete[i]);
    }
    return out;
  }
  /// The sizes of tensor argument `i`, or none when it is None.
  std::optional<Dims> sizes_of(size_t i) const {
    const TensorType* t = i < args.size() ? tensor_or_null(args[i]) : nullptr;
    return t ? std::optional<Dims>(t->sizes) : std::nullopt;
  }
  /// The sizes of every tensor argument.
  std::vector<const Dims*> all_tensor_shapes() const {
    std::vector<const Dims*> shapes;
    for (const Arg& a : args) {
      if (const TensorType* t = tensor_or_null(a)) shapes.push_back(&t->sizes);
    }
    return shapes;
  }
  /// Every result a new tensor of these sizes.
  std::vector<TensorType> same_as_shape(const Dims& sizes) const {
    std::vector<TensorType> out;
    for (size_t i = 0; i < concrete.size(); ++i) out.push_back(fresh(i, sizes));
    return out;
  }
  std::vector<TensorType> same_as(const TensorType& t) const { return same_as_shape(t.sizes); }
  TensorType view(size_t i, Dims sizes, Dims strides, DimExpr offset) const {
    EMBER_INTERNAL_ASSERT(i < concrete.size()) << name() << ": result " << i;
    TensorType t = concrete[i];
    t.sizes = std::move(sizes);
    t.strides = std::move(strides);
    t.storage_offset = std::move(offset);
    return t;
  }
};

/// `d` wrapped into [0, rank) (rank 0 counts as 1), as torch's maybe_wrap_dim.
int64_t wrap_dim(const Call& c, int64_t d, int64_t rank);
/// Broadcast sizes (torch's rules), deciding the equalities they need through guards.
Dims broadcast(const Call& c, const std::vector<const Dims*>& shapes);
/// The sizes of a reduction of `self` over `dim_arg_p` (none or None: every dim).
Dims reduced(const Call& c, const TensorType& self, const Arg* dim_arg_p, bool keepdim);
/// The call's `keepdim` argument (false when it has none).
bool keepdim_of(const Call& c);

/// The rules of ops outside ember's table, by qualified name (shape_rules_by_name.cpp); nullopt
/// for an op without one.
std::optional<std::vector<TensorType>> rule_by_name(const Call& c);

}  // namespace ember::graph::shape_rules_detail
