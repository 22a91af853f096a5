/// \file
/// Integer ranges and interval arithmetic over symbolic expressions (expr.h): what value an
/// expression can take when each symbol lies in its ShapeEnv range. Sound, not exact: a range
/// may be wider than the set of values, never narrower.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "sym/expr.h"

namespace ember::sym {

class ShapeEnv;

/// The inclusive range [lo, hi]; lo == kNegInf and hi == kPosInf mean unbounded. A bound that
/// arithmetic pushes past int64 saturates to the infinity, which only widens the range.
struct Range {
  static constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max();

  int64_t lo = kNegInf;
  int64_t hi = kPosInf;

  /// [v, v].
  static Range constant(int64_t v) { return {v, v}; }
  /// [lo, inf).
  static Range at_least(int64_t lo) { return {lo, kPosInf}; }
  /// (-inf, inf).
  static Range all() { return {}; }

  bool contains(int64_t v) const { return lo <= v && v <= hi; }
  /// Both bounds finite and equal.
  bool is_constant() const { return lo == hi && lo != kNegInf && hi != kPosInf; }
  bool operator==(const Range&) const = default;
  /// "[2, inf]", "[-inf, 7]", "[3, 3]".
  std::string str() const;
};

Range operator+(const Range& a, const Range& b);
Range operator-(const Range& a);
Range operator*(const Range& a, const Range& b);
/// Python floor division; all() when b may be 0.
Range floordiv(const Range& a, const Range& b);
/// Python modulo; all() when b may be 0.
Range mod(const Range& a, const Range& b);
Range min(const Range& a, const Range& b);
Range max(const Range& a, const Range& b);
/// `a` to the power `n` >= 1 (an even power is never negative).
Range pow(const Range& a, int64_t n);
/// The values in both; requires that they overlap.
Range intersect(const Range& a, const Range& b);

/// A range holding every value of `e` for every binding of its symbols inside their ranges in
/// `env`. Interval arithmetic, term by term: sound, and exact for a sum of distinct symbols.
/// Throws UserError when `e` names a symbol that `env` does not hold.
Range range_of(const SymExpr& e, const ShapeEnv& env);

}  // namespace ember::sym
