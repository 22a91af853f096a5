/// \file
/// Shared by simplify.cpp (the driver) and simplify_rules.cpp (the rule table). Not for use
/// outside the simplifier.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loop/bounds.h"
#include "loop/expr.h"

namespace ember::loop::simplify_internal {

/// An i64 expression as sum(coefficient * term) + constant. Terms are the maximal
/// sub-expressions that are not Add, Sub, Mul-by-constant or constants; they are sorted
/// (variables first, then by printed form), merged, and have nonzero coefficients.
struct Linear {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;
};

/// The sort key of a term or commutative operand: variables first, then by printed form.
std::string term_key(const Expr& e);

/// The linear form of an i64 expression; nullopt when a coefficient would overflow.
std::optional<Linear> linear_form(const Expr& e);
/// The canonical expression of `l` (see simplify.h).
Expr rebuild(const Linear& l);

/// The symbolic range [min, max] (inclusive) of a loop variable: its For's min and
/// min + extent - 1, which constant bounds cannot express when the extent is a size.
struct SymbolicRange {
  Expr min, max;
};

/// What a rule sees besides the node: variable bounds (constant and symbolic) and the
/// simplifier itself (for sub-expressions a rule builds).
struct RuleContext {
  const VarBounds& bounds;
  const std::map<std::string, SymbolicRange>& ranges;
  std::function<Expr(const Expr&)> simplify;
};

/// A rewrite: returns the replacement, or an undefined Expr when it does not apply. A rule only
/// sees nodes whose children are already simplified, and only nodes of the kinds in `kinds`.
struct Rule {
  const char* name;
  uint64_t kinds;  ///< bit (1 << ExprKind)
  Expr (*apply)(const Expr& e, const RuleContext& ctx);
};

/// The rule table, in the order the driver tries it.
const std::vector<Rule>& rules();

}  // namespace ember::loop::simplify_internal
