/// \file
/// Values of symbolic expressions: evaluation under bindings, the hint (the value while
/// tracing), and substitution of symbols by expressions.
#pragma once

#include <cstdint>
#include <map>

#include "sym/expr.h"
#include "sym/shape_env.h"

namespace ember::sym {

/// The value of `e` with each symbol bound by `bindings` (expr.h's semantics: Python floor
/// division and modulo). Throws UserError for a symbol without a value and for a zero divisor,
/// Unsupported when a value leaves int64.
int64_t evaluate(const SymExpr& e, const Bindings& bindings);

/// evaluate() with every symbol's hint in `env`. For heuristics only: a decision taken from a
/// hint holds for other values only under a guard.
int64_t hint(const SymExpr& e, const ShapeEnv& env);

/// `e` with each symbol in `replacements` replaced by its expression, rebuilt through the
/// builders (so the result is canonical). Symbols not in the map stay. Throws UserError where a
/// divisor becomes the constant 0.
SymExpr substitute(const SymExpr& e, const std::map<SymbolId, SymExpr>& replacements);

}  // namespace ember::sym
