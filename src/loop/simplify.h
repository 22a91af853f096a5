/// \file
/// The expression simplifier: constant folding, algebraic identities, a canonical form for i64
/// index arithmetic, and floor-division / modulo rules that use loop bounds. Rules are a table in
/// simplify_rules.cpp; each has a name, used by statistics and tests.
///
/// Requires: well-typed IR (every make() succeeded). Statements: verifier-valid, so every Var
/// is bound by an enclosing For or Let.
/// Guarantees:
///  - The result computes the same values as the input for every binding of the size variables
///    and every input, under the semantics of expr.h (i64 index arithmetic does not overflow).
///  - Floats are never reassociated and x + 0.0, x * 0.0 are left alone (signed zeros, NaN);
///    only exact folds of f32/f64 constants, x * 1, x / 1 and x - 0.0 apply.
///  - i64 Add/Sub/Mul trees come out as a sum of terms sorted by their printed form (variables
///    first), each with its coefficient, then the constant: `((i * 4) + j) + 5` style.
///  - Deterministic, and idempotent: simplify(simplify(e)) == simplify(e).
///  - Statement level: For loops with a constant extent <= 0 and If with a constant condition
///    are removed; loop extents and Let values give variable bounds to the rules below them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loop/bounds.h"
#include "loop/stmt.h"

namespace ember::loop {

/// How often each rule fired, by rule name.
struct SimplifyStats {
  std::map<std::string, int> rule_counts;
  int total() const;
};

/// Simplifies `e`, whose variables lie in `bounds` (unlisted ones are unbounded).
Expr simplify(const Expr& e, const VarBounds& bounds = {}, SimplifyStats* stats = nullptr);
Stmt simplify(const Stmt& s, SimplifyStats* stats = nullptr);
/// Simplifies the body and the buffer sizes and strides.
Kernel simplify(const Kernel& k, SimplifyStats* stats = nullptr);

/// The coefficient of each of `vars` in the i64 expression `index`, when `index` is affine in
/// them: it folds to a constant with every var at 0, and with one var at 1 and at 3 (the others
/// 0) it moves by one and three times the coefficient. nullopt when it is not, or when it reads
/// anything else (another variable, a load). Used to find the strides of an access.
std::optional<std::vector<int64_t>> affine_coefficients(const Expr& index,
                                                        const std::vector<std::string>& vars);

}  // namespace ember::loop
