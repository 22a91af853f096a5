/// \file
/// Reads symbolic expressions from text: the printed form (printer.h) and any other expression
/// in Python's integer syntax over the same operators.
///
/// Grammar (tokens separated by optional whitespace; `#` starts a comment to end of line), with
/// Python's precedence and left associativity:
///
///   expr    := term {('+' | '-') term}
///   term    := unary {('*' | '//' | '%') unary}
///   unary   := '-' unary | primary
///   primary := INT | NAME | ('min' | 'max') '(' expr ',' expr ')' | '(' expr ')'
///
/// INT is a decimal up to INT64_MAX. A NAME is a symbol of the ShapeEnv (`min` and `max` are
/// reserved). The result is built through expr.h's builders, so it is canonical.
///
/// Errors are UserErrors "line L:C: <what>": an unexpected token, an unknown symbol, an integer
/// out of range, a division by the constant 0, and arithmetic that overflows int64.
#pragma once

#include <string_view>

#include "sym/expr.h"
#include "sym/shape_env.h"

namespace ember::sym {

/// Parses one expression; the whole text must be consumed.
SymExpr parse(std::string_view text, const ShapeEnv& env);

}  // namespace ember::sym
