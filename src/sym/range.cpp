#include "sym/range.h"

#include <algorithm>

#include "support/error.h"
#include "sym/int_math.h"
#include "sym/shape_env.h"

namespace ember::sym {
namespace {

constexpr int64_t kNegInf = Range::kNegInf;
constexpr int64_t kPosInf = Range::kPosInf;

bool is_inf(int64_t x) {
  return x == kNegInf || x == kPosInf;
}
int sign(int64_t x) {
  return x < 0 ? -1 : x > 0 ? 1 : 0;
}

/// A lower bound plus a lower bound; -inf absorbs, overflow widens to -inf.
int64_t add_lo(int64_t a, int64_t b) {
  int64_t r;
  if (a == kNegInf || b == kNegInf || __builtin_add_overflow(a, b, &r)) return kNegInf;
  return r;
}
/// An upper bound plus an upper bound; +inf absorbs, overflow widens to +inf.
int64_t add_hi(int64_t a, int64_t b) {
  int64_t r;
  if (a == kPosInf || b == kPosInf || __builtin_add_overflow(a, b, &r)) return kPosInf;
  return r;
}
int64_t neg_bound(int64_t x) {
  return x == kPosInf ? kNegInf : x == kNegInf ? kPosInf : -x;
}

/// The product of two bounds; 0 times an infinity is 0 (every value is finite), and a product
/// past int64 saturates to the infinity of its sign.
int64_t mul_bound(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  int64_t r;
  if (is_inf(a) || is_inf(b) || __builtin_mul_overflow(a, b, &r) || r == kNegInf) {
    return sign(a) * sign(b) > 0 ? kPosInf : kNegInf;
  }
  return r;
}

}  // namespace

std::string Range::str() const {
  auto bound = [](int64_t v) {
    return v == kNegInf ? std::string("-inf") : v == kPosInf ? "inf" : std::to_string(v);
  };
  return "[" + bound(lo) + ", " + bound(hi) + "]";
}

Range operator+(const Range& a, const Range& b) {
  return {add_lo(a.lo, b.lo), add_hi(a.hi, b.hi)};
}

Range operator-(const Range& a) {
  return {neg_bound(a.hi), neg_bound(a.lo)};
}

Range operator*(const Range& a, const Range& b) {
  int64_t c[] = {mul_bound(a.lo, b.lo), mul_bound(a.lo, b.hi), mul_bound(a.hi, b.lo),
                 mul_bound(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

Range floordiv(const Range& a, const Range& b) {
  if (b.hi <= -1) return floordiv(-a, -b);
  if (b.lo < 1) return Range::all();
  // x // d rises with x; for x >= 0 it falls as d grows, for x < 0 it rises toward -1.
  int64_t lo = a.lo == kNegInf ? kNegInf
               : a.lo >= 0     ? (b.hi == kPosInf ? 0 : detail::floordiv(a.lo, b.hi))
                               : detail::floordiv(a.lo, b.lo);
  int64_t hi = a.hi == kPosInf ? kPosInf
               : a.hi >= 0     ? detail::floordiv(a.hi, b.lo)
                               : (b.hi == kPosInf ? -1 : detail::floordiv(a.hi, b.hi));
  return {lo, hi};
}

Range mod(const Range& a, const Range& b) {
  if (b.hi <= -1) return -mod(-a, -b);
  if (b.lo < 1) return Range::all();
  if (a.lo >= 0 && a.hi < b.lo) return a;
  if (b.is_constant() && !is_inf(a.lo) && !is_inf(a.hi) &&
      detail::floordiv(a.lo, b.lo) == detail::floordiv(a.hi, b.lo)) {
    return {detail::mod(a.lo, b.lo), detail::mod(a.hi, b.lo)};
  }
  int64_t hi = b.hi == kPosInf ? kPosInf : b.hi - 1;
  if (a.lo >= 0) hi = std::min(hi, a.hi);
  return {0, hi};
}

Range min(const Range& a, const Range& b) {
  return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
}
Range max(const Range& a, const Range& b) {
  return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
}

Range pow(const Range& a, int64_t n) {
  EMBER_INTERNAL_ASSERT(n >= 1) << n;
  Range r = a;
  for (int64_t i = 1; i < n; ++i) r = r * a;
  if (n % 2 == 0) r.lo = std::max<int64_t>(r.lo, 0);
  return r;
}

Range intersect(const Range& a, const Range& b) {
  Range r{std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
  EMBER_INTERNAL_ASSERT(r.lo <= r.hi) << a.str() << " and " << b.str() << " do not overlap";
  return r;
}

Range range_of(const SymExpr& e, const ShapeEnv& env) {
  auto atom_range = [&](const AtomNode& a) {
    switch (a.kind) {
      case AtomKind::Symbol:
        return env.range(a.id);
      case AtomKind::FloorDiv:
        return floordiv(range_of(a.lhs, env), range_of(a.rhs, env));
      case AtomKind::Mod:
        return mod(range_of(a.lhs, env), range_of(a.rhs, env));
      case AtomKind::Min:
        return min(range_of(a.lhs, env), range_of(a.rhs, env));
      case AtomKind::Max:
        return max(range_of(a.lhs, env), range_of(a.rhs, env));
    }
    return Range::all();
  };
  Range r = Range::constant(e.node().constant);
  for (const Term& t : e.node().terms) {
    Range term = Range::constant(t.coeff);
    for (const Factor& f : t.factors) term = term * pow(atom_range(*f.atom), f.power);
    r = r + term;
  }
  return r;
}

}  // namespace ember::sym
