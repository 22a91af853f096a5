#include "sym/eval.h"

#include <algorithm>

#include "support/error.h"
#include "sym/int_math.h"

namespace ember::sym {
namespace {

int64_t evaluate_atom(const AtomNode& a, const Bindings& bindings) {
  if (a.kind == AtomKind::Symbol) {
    auto it = bindings.find(a.id);
    EMBER_CHECK(it != bindings.end()) << "no value for symbol " << a.name;
    return it->second;
  }
  int64_t x = evaluate(a.lhs, bindings);
  int64_t d = evaluate(a.rhs, bindings);
  switch (a.kind) {
    case AtomKind::FloorDiv:
      return detail::floordiv(x, d);
    case AtomKind::Mod:
      return detail::mod(x, d);
    case AtomKind::Min:
      return std::min(x, d);
    case AtomKind::Max:
      return std::max(x, d);
    case AtomKind::Symbol:
      break;
  }
  return 0;
}

SymExpr substitute_atom(const std::shared_ptr<const AtomNode>& a,
                        const std::map<SymbolId, SymExpr>& replacements) {
  if (a->kind == AtomKind::Symbol) {
    auto it = replacements.find(a->id);
    return it == replacements.end() ? atom_expr(a) : it->second;
  }
  return apply(a->kind, substitute(a->lhs, replacements), substitute(a->rhs, replacements));
}

}  // namespace

int64_t evaluate(const SymExpr& e, const Bindings& bindings) {
  int64_t v = e.node().constant;
  for (const Term& t : e.node().terms) {
    int64_t term = t.coeff;
    for (const Factor& f : t.factors) {
      int64_t a = evaluate_atom(*f.atom, bindings);
      for (int64_t i = 0; i < f.power; ++i) term = detail::mul(term, a);
    }
    v = detail::add(v, term);
  }
  return v;
}

int64_t hint(const SymExpr& e, const ShapeEnv& env) {
  return evaluate(e, env.hints());
}

SymExpr substitute(const SymExpr& e, const std::map<SymbolId, SymExpr>& replacements) {
  return map_atoms(e, [&](const std::shared_ptr<const AtomNode>& a) {
    return substitute_atom(a, replacements);
  });
}

}  // namespace ember::sym
