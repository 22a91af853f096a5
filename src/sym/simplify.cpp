#include "sym/simplify.h"

#include <optional>

#include "sym/int_math.h"
#include "sym/range.h"

namespace ember::sym {
namespace {

/// The range rules of simplify.h for the atom `kind(x, d)`, whose operands are simplified.
std::optional<SymExpr> by_ranges(AtomKind kind, const SymExpr& x, const SymExpr& d,
                                 const ShapeEnv& env) {
  if (kind == AtomKind::Min || kind == AtomKind::Max) {
    Range diff = range_of(x - d, env);
    bool x_smaller = diff.hi <= 0, d_smaller = diff.lo >= 0;
    if (kind == AtomKind::Min && (x_smaller || d_smaller)) return x_smaller ? x : d;
    if (kind == AtomKind::Max && (x_smaller || d_smaller)) return x_smaller ? d : x;
    return std::nullopt;
  }
  Range rx = range_of(x, env);
  Range rd = range_of(d, env);
  if (rd.lo < 1) return std::nullopt;
  bool is_div = kind == AtomKind::FloorDiv;
  if (rx.lo >= 0 && rx.hi < rd.lo) return is_div ? SymExpr(0) : x;
  if (rd.is_constant() && rx.lo != Range::kNegInf && rx.hi != Range::kPosInf) {
    int64_t k = detail::floordiv(rx.lo, rd.lo);
    if (k == detail::floordiv(rx.hi, rd.lo)) return is_div ? SymExpr(k) : x - SymExpr(k) * d;
  }
  return std::nullopt;
}

SymExpr simplify_atom(const std::shared_ptr<const AtomNode>& atom, const ShapeEnv& env) {
  if (atom->kind == AtomKind::Symbol) {
    // A symbol pinned to one value (a guard `s == c` narrowed its range) is that value.
    const Range r = env.range(atom->id);
    return r.is_constant() ? SymExpr(r.lo) : atom_expr(atom);
  }
  SymExpr x = simplify(atom->lhs, env);
  SymExpr d = simplify(atom->rhs, env);
  if (auto r = by_ranges(atom->kind, x, d, env)) return *r;
  SymExpr built = apply(atom->kind, x, d);
  // The builder may have split the atom (a + b // d): simplify the new atoms in turn.
  const ExprNode& n = built.node();
  bool same = n.constant == 0 && n.terms.size() == 1 && n.terms[0].coeff == 1 &&
              n.terms[0].factors.size() == 1 && n.terms[0].factors[0].power == 1 &&
              n.terms[0].factors[0].atom->kind == atom->kind;
  if (!same) return simplify(built, env);
  const AtomNode& b = *n.terms[0].factors[0].atom;
  if (auto r = by_ranges(b.kind, b.lhs, b.rhs, env)) return *r;
  return built;
}

}  // namespace

SymExpr simplify(const SymExpr& e, const ShapeEnv& env) {
  return map_atoms(e,
                   [&](const std::shared_ptr<const AtomNode>& a) { return simplify_atom(a, env); });
}

}  // namespace ember::sym
