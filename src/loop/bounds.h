/// \file
/// Interval bounds of integer expressions: what the simplifier knows about the range of an index
/// from loop extents, Let values and the sign of sizes. Conservative: the true value always lies
/// in the interval, and an end that is unknown (or overflows) is left open.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "loop/expr.h"

namespace ember::loop {

/// The closed interval [lo, hi]; an absent end is unbounded.
struct Interval {
  std::optional<int64_t> lo, hi;

  static Interval everything() { return {}; }
  static Interval point(int64_t v) { return {v, v}; }
  /// [lo, hi] with both ends known.
  static Interval range(int64_t lo, int64_t hi) { return {lo, hi}; }
  bool is_point() const { return lo && hi && *lo == *hi; }
  /// Both ends known and lo <= hi.
  bool is_bounded() const { return lo && hi; }
  bool operator==(const Interval&) const = default;
};

/// Known intervals of variables, by name.
using VarBounds = std::map<std::string, Interval>;

/// Bounds of integer or b8 expression `e`. Vars not in `vars` are unbounded; SizeVars are >= 0;
/// b8 values are in [0, 1]. Float expressions (and anything not understood) are unbounded.
Interval bounds_of(const Expr& e, const VarBounds& vars);

/// The interval of a loop variable running over [min, min + extent): [min.lo, min.hi + extent.hi
/// - 1]. Empty loops run no iterations, so claiming the bound for them is harmless.
Interval loop_var_bounds(const Interval& min, const Interval& extent);

}  // namespace ember::loop
