#include "sym/query.h"

#include <algorithm>
#include <numeric>

#include "support/error.h"
#include "sym/range.h"
#include "sym/simplify.h"

namespace ember::sym {
namespace {

/// range_of(e), narrowed by the min and max terms at the top of `e` (Note [Min and max in
/// differences]): the first one here, the next ones in the recursive calls, `depth` in all.
Range difference_range(const SymExpr& e, const ShapeEnv& env, int depth) {
  Range r = range_of(e, env);
  if (depth == 0) return r;
  for (const Term& t : e.node().terms) {
    if (t.factors.size() != 1 || t.factors[0].power != 1) continue;
    const AtomNode& m = *t.factors[0].atom;
    if (m.kind != AtomKind::Min && m.kind != AtomKind::Max) continue;
    SymExpr rest = e - SymExpr(t.coeff) * atom_expr(t.factors[0].atom);
    Range rx = difference_range(rest + SymExpr(t.coeff) * m.lhs, env, depth - 1);
    Range ry = difference_range(rest + SymExpr(t.coeff) * m.rhs, env, depth - 1);
    bool below_both = (m.kind == AtomKind::Min) == (t.coeff > 0);
    Range bound = below_both ? Range{std::min(rx.lo, ry.lo), std::min(rx.hi, ry.hi)}
                             : Range{std::max(rx.lo, ry.lo), std::max(rx.hi, ry.hi)};
    // The calls on e_x and e_y narrow by the next min/max term: one term per level keeps the
    // work at 2^depth range computations.
    return {std::max(r.lo, bound.lo), std::min(r.hi, bound.hi)};
  }
  return r;
}

/// `e` divided by its positive content: the gcd of its coefficients times each symbol (of range
/// >= 1) that every term holds, at its smallest power. Dividing by a positive value keeps the
/// sign, so relations of `e` with 0 are those of the quotient, whose range interval arithmetic
/// bounds better: `s0*s1*64 - s1*64` is `s1*64 * (s0 - 1)`, positive for s0 >= 2, though its
/// own range (lo(s0*s1*64) - hi(s1*64)) is unbounded below.
SymExpr without_positive_content(const SymExpr& e, const ShapeEnv& env) {
  const ExprNode& n = e.node();
  if (n.constant != 0 || n.terms.size() < 2) return e;
  int64_t g = 0;
  for (const Term& t : n.terms) g = std::gcd(g, t.coeff < 0 ? -t.coeff : t.coeff);
  SymExpr content(g);
  for (const Factor& f : n.terms[0].factors) {
    if (f.atom->kind != AtomKind::Symbol || env.range(f.atom->id).lo < 1) continue;
    int64_t power = f.power;
    for (const Term& t : n.terms) {
      int64_t here = 0;
      for (const Factor& h : t.factors) {
        if (h.atom->kind == AtomKind::Symbol && h.atom->id == f.atom->id) here = h.power;
      }
      power = std::min(power, here);
    }
    for (int64_t p = 0; p < power; ++p) content = content * atom_expr(f.atom);
  }
  if (content == SymExpr(1)) return e;
  SymExpr q = floordiv(e, content);
  return q * content == e ? q : e;  // exact by construction; checked, as the sign relies on it
}

// Note [Min and max in differences]
// Interval arithmetic treats min(x, y) - x as two unrelated ranges and cannot see that it is
// never positive. For a term c*m with m = min(x, y) or max(x, y), the expression e equals, at
// every binding, e_x (m replaced by x) or e_y, so its range lies in the hull of theirs. And when
// c*m is below both c*x and c*y (a min with c > 0, a max with c < 0), e is at most both, so
// e <= min(hi(e_x), hi(e_y)); symmetrically above both, e >= max(lo(e_x), lo(e_y)). Both bounds
// hold everywhere, so intersecting them with range_of(e) stays sound.

}  // namespace

const char* rel_name(Rel r) {
  switch (r) {
    case Rel::EQ:
      return "==";
    case Rel::NE:
      return "!=";
    case Rel::LT:
      return "<";
    case Rel::LE:
      return "<=";
    case Rel::GT:
      return ">";
    case Rel::GE:
      return ">=";
  }
  return "?";
}

bool statically_known_true(const SymExpr& a, Rel rel, const SymExpr& b, const ShapeEnv& env) {
  Range r;
  try {
    r = difference_range(without_positive_content(simplify(a - b, env), env), env, /*depth=*/4);
  } catch (const Unsupported&) {
    return false;  // the difference overflows int64: nothing is known
  }
  switch (rel) {
    case Rel::EQ:
      return r.lo == 0 && r.hi == 0;
    case Rel::NE:
      return r.hi < 0 || r.lo > 0;
    case Rel::LT:
      return r.hi < 0;
    case Rel::LE:
      return r.hi <= 0;
    case Rel::GT:
      return r.lo > 0;
    case Rel::GE:
      return r.lo >= 0;
  }
  return false;
}

bool statically_known_multiple_of(const SymExpr& e, int64_t k, const ShapeEnv& env) {
  EMBER_CHECK(k != 0) << "divisibility by zero";
  try {
    SymExpr m = simplify(mod(e, k), env);
    if (m.as_constant() == 0) return true;
    Range r = range_of(m, env);
    return r.lo == 0 && r.hi == 0;
  } catch (const Unsupported&) {
    return false;
  }
}

}  // namespace ember::sym
