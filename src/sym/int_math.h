/// \file
/// Checked int64 arithmetic with Python's floor division and modulo, for the symbolic engine
/// (expr.h's value rules). Internal to src/sym.
#pragma once

#include <cstdint>
#include <limits>

#include "support/error.h"

namespace ember::sym::detail {

/// Throws Unsupported unless `v` is in (INT64_MIN, INT64_MAX] and the operation did not overflow.
inline int64_t checked(bool overflowed, int64_t v) {
  EMBER_UNSUPPORTED(!overflowed && v != std::numeric_limits<int64_t>::min())
      << "symbolic integer overflow";
  return v;
}
inline int64_t add(int64_t a, int64_t b) {
  int64_t r;
  bool o = __builtin_add_overflow(a, b, &r);
  return checked(o, r);
}
inline int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  bool o = __builtin_sub_overflow(a, b, &r);
  return checked(o, r);
}
inline int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  bool o = __builtin_mul_overflow(a, b, &r);
  return checked(o, r);
}
inline int64_t neg(int64_t a) {
  return sub(0, a);
}

/// Python `a // b`, rounding toward -inf. Throws UserError when b == 0.
inline int64_t floordiv(int64_t a, int64_t b) {
  EMBER_CHECK(b != 0) << "division by zero";
  if (b == -1) return neg(a);
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

/// Python `a % b`, with the sign of b. Throws UserError when b == 0.
inline int64_t mod(int64_t a, int64_t b) {
  EMBER_CHECK(b != 0) << "modulo by zero";
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace ember::sym::detail
