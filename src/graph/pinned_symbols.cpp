#include "graph/pinned_symbols.h"

#include <unordered_set>

#include "sym/simplify.h"

namespace ember::graph {
namespace {

DimExpr fold(const DimExpr& d, const sym::ShapeEnv& env) {
  return d.is_constant() ? d : DimExpr(sym::simplify(d.expr(), env));
}

}  // namespace

Dims fold_pinned(const Dims& dims, const sym::ShapeEnv& env) {
  Dims out;
  out.reserve(dims.size());
  for (const DimExpr& d : dims) out.push_back(fold(d, env));
  return out;
}

void fold_pinned_inputs(Graph& g) {
  const sym::ShapeEnv& env = g.symbols;
  for (const Input& in : g.inputs) {
    TensorType& t = g.values.at(static_cast<size_t>(in.value)).type;
    t.sizes = fold_pinned(t.sizes, env);
    t.strides = fold_pinned(t.strides, env);
    t.storage_offset = fold(t.storage_offset, env);
  }
}

void fold_pinned_symbols(Graph& g) {
  bool pinned = false;
  for (const sym::SymbolInfo& s : g.symbols.symbols()) pinned |= s.range.is_constant();
  if (!pinned) return;
  const sym::ShapeEnv& env = g.symbols;
  std::unordered_set<ValueId> inputs;
  for (const Input& in : g.inputs) inputs.insert(in.value);
  for (Node& n : g.nodes) {
    for (Arg& a : n.args) {
      if (const auto* d = std::get_if<DimExpr>(&a)) {
        a = int_arg(fold(*d, env));
      } else if (const auto* ds = std::get_if<Dims>(&a)) {
        a = int_list_arg(fold_pinned(*ds, env));
      }
    }
    for (ValueId v : n.outputs) {
      if (inputs.contains(v)) continue;
      TensorType& t = g.values.at(static_cast<size_t>(v)).type;
      t.sizes = fold_pinned(t.sizes, env);
      t.strides = fold_pinned(t.strides, env);
      t.storage_offset = fold(t.storage_offset, env);
    }
  }
}

}  // namespace ember::graph
