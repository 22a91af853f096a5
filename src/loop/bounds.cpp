#include "loop/bounds.h"

#include <algorithm>

namespace ember::loop {
namespace {

using Opt = std::optional<int64_t>;

Opt add(Opt a, Opt b) {
  int64_t r;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

Opt sub(Opt a, Opt b) {
  int64_t r;
  if (!a || !b || __builtin_sub_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

Opt mul(Opt a, Opt b) {
  int64_t r;
  if (!a || !b || __builtin_mul_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

Interval add(const Interval& a, const Interval& b) {
  return {add(a.lo, b.lo), add(a.hi, b.hi)};
}
Interval sub(const Interval& a, const Interval& b) {
  return {sub(a.lo, b.hi), sub(a.hi, b.lo)};
}

Interval mul(const Interval& a, const Interval& b) {
  if (a.is_bounded() && b.is_bounded()) {
    Opt p[] = {mul(a.lo, b.lo), mul(a.lo, b.hi), mul(a.hi, b.lo), mul(a.hi, b.hi)};
    if (!p[0] || !p[1] || !p[2] || !p[3]) return Interval::everything();
    return {std::min({*p[0], *p[1], *p[2], *p[3]}), std::max({*p[0], *p[1], *p[2], *p[3]})};
  }
  // One side a constant: scale the other (a negative constant swaps the ends).
  for (int swap = 0; swap < 2; ++swap) {
    const Interval& c = swap ? a : b;
    const Interval& x = swap ? b : a;
    if (c.is_point() && *c.lo >= 0) return {mul(x.lo, c.lo), mul(x.hi, c.lo)};
    if (c.is_point()) return {mul(x.hi, c.lo), mul(x.lo, c.lo)};
  }
  if (a.lo && b.lo && *a.lo >= 0 && *b.lo >= 0) return {mul(a.lo, b.lo), std::nullopt};
  return Interval::everything();
}

Interval floordiv(const Interval& a, const Interval& b) {
  if (!b.is_point() || *b.lo <= 0) return Interval::everything();
  int64_t d = *b.lo;
  return {a.lo ? Opt(floordiv_i64(*a.lo, d)) : std::nullopt,
          a.hi ? Opt(floordiv_i64(*a.hi, d)) : std::nullopt};
}

Interval mod(const Interval& a, const Interval& b) {
  if (!b.lo || *b.lo <= 0) return Interval::everything();
  Interval r{0, b.hi ? sub(b.hi, Opt(1)) : std::nullopt};
  if (a.lo && *a.lo >= 0) {
    // A non-negative dividend is its own remainder when it is below every divisor.
    if (a.hi && *a.hi < *b.lo) return a;
    if (a.hi && (!r.hi || *a.hi < *r.hi)) r.hi = a.hi;
  }
  return r;
}

Opt lower(Opt a, Opt b) {
  return a && b ? Opt(std::min(*a, *b)) : std::nullopt;
}
Opt upper(Opt a, Opt b) {
  return a && b ? Opt(std::max(*a, *b)) : std::nullopt;
}
/// The tighter of two bounds where either may be unknown.
Opt tight_min(Opt a, Opt b) {
  return a && b ? Opt(std::min(*a, *b)) : a ? a : b;
}
Opt tight_max(Opt a, Opt b) {
  return a && b ? Opt(std::max(*a, *b)) : a ? a : b;
}

}  // namespace

Interval bounds_of(const Expr& e, const VarBounds& vars) {
  if (e.dtype() == DType::Bool) {
    if (auto c = as_const_int(e)) return Interval::point(*c);
    return Interval::range(0, 1);
  }
  if (!is_int(e.dtype())) return Interval::everything();
  auto b = [&](const Expr& x) { return bounds_of(x, vars); };
  switch (e.kind()) {
    case ExprKind::IntImm:
      return Interval::point(e.as<IntImm>()->value);
    case ExprKind::Var: {
      auto it = vars.find(e.as<Var>()->name);
      return it == vars.end() ? Interval::everything() : it->second;
    }
    case ExprKind::SizeVar:
      return {0, std::nullopt};
    case ExprKind::Add:
      return add(b(e.as<Add>()->a), b(e.as<Add>()->b));
    case ExprKind::Sub:
      return sub(b(e.as<Sub>()->a), b(e.as<Sub>()->b));
    case ExprKind::Mul:
      return mul(b(e.as<Mul>()->a), b(e.as<Mul>()->b));
    case ExprKind::FloorDiv:
      return floordiv(b(e.as<FloorDiv>()->a), b(e.as<FloorDiv>()->b));
    case ExprKind::Mod:
      return mod(b(e.as<Mod>()->a), b(e.as<Mod>()->b));
    case ExprKind::Min: {
      Interval x = b(e.as<Min>()->a), y = b(e.as<Min>()->b);
      return {lower(x.lo, y.lo), tight_min(x.hi, y.hi)};
    }
    case ExprKind::Max: {
      Interval x = b(e.as<Max>()->a), y = b(e.as<Max>()->b);
      return {tight_max(x.lo, y.lo), upper(x.hi, y.hi)};
    }
    case ExprKind::Select: {
      Interval x = b(e.as<Select>()->t), y = b(e.as<Select>()->f);
      return {lower(x.lo, y.lo), upper(x.hi, y.hi)};
    }
    case ExprKind::Cast: {
      const Expr& v = e.as<Cast>()->value;
      // Widening to i64 keeps the value.
      if (e.dtype() == kIndexType && (is_int(v.dtype()) || v.dtype() == DType::Bool)) return b(v);
      return Interval::everything();
    }
    case ExprKind::Call: {
      // check_index(x, lo, hi) returns only values in [lo, hi).
      const auto* c = e.as<Call>();
      if (c->fn != CallFn::CheckIndex) return Interval::everything();
      Interval x = b(c->args[0]), lo = b(c->args[1]), hi = b(c->args[2]);
      return {tight_max(x.lo, lo.lo), tight_min(x.hi, hi.hi ? sub(hi.hi, Opt(1)) : std::nullopt)};
    }
    case ExprKind::FloatImm:
    case ExprKind::Div:
    case ExprKind::LT:
    case ExprKind::LE:
    case ExprKind::EQ:
    case ExprKind::NE:
    case ExprKind::And:
    case ExprKind::Or:
    case ExprKind::BitAnd:
    case ExprKind::BitOr:
    case ExprKind::BitXor:
    case ExprKind::Shl:
    case ExprKind::Shr:
    case ExprKind::Not:
    case ExprKind::Load:
      return Interval::everything();
  }
  return Interval::everything();
}

Interval loop_var_bounds(const Interval& min, const Interval& extent) {
  return {min.lo, sub(add(min.hi, extent.hi), Opt(1))};
}

}  // namespace ember::loop
