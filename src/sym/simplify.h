/// \file
/// Simplification of symbolic expressions with the symbols' ranges (the rules that expr.h's
/// builders cannot apply, because they hold only for the values a ShapeEnv allows).
#pragma once

#include "sym/expr.h"
#include "sym/shape_env.h"

namespace ember::sym {

/// Rewrites `e`, bottom up, with the builders' rules (expr.h) and these, each applied only where
/// range_of() (range.h) proves its condition for every value in the ranges of `env`:
///  - x // d -> k and x % d -> x - k*d when every x lies in [k*d, k*d + d) for a constant d > 0;
///    so x // d -> 0 and x % d -> x when 0 <= x < d;
///  - x // d -> 0 and x % d -> x when 0 <= x < d for a symbolic d, from the two ranges;
///  - min(a, b) -> a and max(a, b) -> b when a - b <= 0 (and the other way round when >= 0).
/// Guarantees: the result is canonical and, for every binding inside the ranges, evaluates to the
/// value of `e` (evaluate() in eval.h). simplify(simplify(e)) == simplify(e).
SymExpr simplify(const SymExpr& e, const ShapeEnv& env);

}  // namespace ember::sym
