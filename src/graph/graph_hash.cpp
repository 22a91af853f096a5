#include "graph/graph_hash.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "support/hash.h"

namespace ember::graph {
namespace {

/// Every list is hashed with its length first, so adjacent lists cannot trade elements.
/// A constant hashes as its value (static graphs hash as they did before symbols), an expression
/// as a marker and its structural hash.
void hash_dim(Hasher& h, const DimExpr& e) {
  if (std::optional<int64_t> c = e.as_constant()) {
    h.i64(*c);
  } else {
    h.str("sym");
    h.u64(e.hash());
  }
}

void hash_dims(Hasher& h, const Dims& d) {
  h.u64(d.size());
  for (const DimExpr& e : d) hash_dim(h, e);
}

void hash_type(Hasher& h, const TensorType& t) {
  h.i64(static_cast<int64_t>(t.dtype));
  h.i64(static_cast<int64_t>(t.device.kind)).i64(t.device.index);
  hash_dims(h, t.sizes);
  hash_dims(h, t.strides);
  hash_dim(h, t.storage_offset);
  h.u64(t.requires_grad);
}

/// Types are looked up safely: hashing must not crash on a graph the verifier would reject.
void hash_value(Hasher& h, const Graph& g, ValueId id) {
  h.i64(id);
  bool known = id >= 0 && static_cast<size_t>(id) < g.values.size();
  h.u64(known);
  if (known) hash_type(h, g.values[id].type);
}

/// All NaNs print as "nan", so they hash alike; -0.0 and 0.0 print differently and stay distinct.
void hash_double(Hasher& h, double v) {
  h.f64(std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v);
}

void hash_arg(Hasher& h, const Arg& a) {
  h.u64(a.index());
  std::visit(
      [&h](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, NoneArg>) {
        } else if constexpr (std::is_same_v<T, bool>) {
          h.u64(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          h.i64(v);
        } else if constexpr (std::is_same_v<T, double>) {
          hash_double(h, v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          h.str(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          h.u64(v.size());
          for (int64_t x : v) h.i64(x);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          h.u64(v.size());
          for (double x : v) hash_double(h, x);
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          h.u64(v.size());
          for (bool x : v) h.u64(x);
        } else if constexpr (std::is_same_v<T, DType> || std::is_same_v<T, Layout> ||
                             std::is_same_v<T, MemoryFormat>) {
          h.i64(static_cast<int64_t>(v));
        } else if constexpr (std::is_same_v<T, Device>) {
          h.i64(static_cast<int64_t>(v.kind)).i64(v.index);
        } else if constexpr (std::is_same_v<T, ValueRef>) {
          h.i64(v.id);
        } else if constexpr (std::is_same_v<T, DimExpr>) {
          hash_dim(h, v);
        } else if constexpr (std::is_same_v<T, Dims>) {
          hash_dims(h, v);
        } else {
          static_assert(std::is_same_v<T, ValueList>, "hash_arg misses an Arg alternative");
          h.u64(v.optional_items).u64(v.items.size());
          for (const std::optional<ValueId>& x : v.items) {
            h.u64(x.has_value()).i64(x.value_or(-1));
          }
        }
      },
      a);
}

void hash_op(Hasher& h, const OpInfo& op) {
  h.str(op.name).str(op.overload);
  h.u64(op.arg_names.size());
  for (const std::string& n : op.arg_names) h.str(n);
  h.u64(op.kwarg_only.size());
  for (bool k : op.kwarg_only) h.u64(k);
  h.u64(op.returns_list);
}

}  // namespace

uint64_t hash_graph(const Graph& g) {
  Hasher h;
  h.str("ember.graph.v1");
  // The symbols: a static graph has none, and hashes as before. Hints count: the scheduler picks
  // strategies from them.
  for (const sym::SymbolInfo& info : g.symbols.symbols()) {
    h.str("symbol").str(info.name).i64(info.range.lo).i64(info.range.hi).i64(info.hint);
  }
  h.u64(g.ops.size());
  for (const OpInfo& op : g.ops) hash_op(h, op);
  h.u64(g.inputs.size());
  for (const Input& in : g.inputs) {
    h.i64(static_cast<int64_t>(in.kind));
    hash_value(h, g, in.value);
  }
  h.u64(g.nodes.size());
  for (const Node& n : g.nodes) {
    h.i64(n.op);
    h.u64(n.args.size());
    for (const Arg& a : n.args) hash_arg(h, a);
    h.u64(n.outputs.size());
    for (ValueId id : n.outputs) hash_value(h, g, id);
  }
  h.u64(g.outputs.size());
  for (ValueId id : g.outputs) h.i64(id);
  h.u64(g.mutations.size());
  for (const Mutation& m : g.mutations) h.i64(m.input).i64(m.value);
  return h.digest();
}

}  // namespace ember::graph
