/// \file
/// The text form of symbolic expressions; parser.h reads it back, and print(parse(t)) == t for
/// every printed t. Deterministic: it follows the canonical order (expr.h).
///
///   s0*2 + s1 - (s2 // 8)*3 + min(s0, s1) + 4
///
///  - The terms in canonical order, joined by " + ", or " - " before a negative coefficient (the
///    first term takes a leading "-"); then the constant, when not 0, the same way. The
///    expression 0 prints as "0", a constant alone as its decimal ("-3").
///  - A term: its atoms joined by "*" (an atom to the power n, n times), then "*|coeff|" unless
///    the coefficient is 1 or -1.
///  - Atoms: a symbol's name; `(a // b)`, `(a % b)`, `min(a, b)`, `max(a, b)`. An operand of
///    `//` and `%` is parenthesized where Python would read it otherwise: a sum on the left
///    (`((s0 + 1) // 4)`), anything but a nonnegative constant or a lone atom on the right
///    (`(s0 // (s1*2))`).
#pragma once

#include <ostream>
#include <string>

#include "sym/expr.h"

namespace ember::sym {

std::string print(const SymExpr& e);

std::ostream& operator<<(std::ostream& os, const SymExpr& e);

}  // namespace ember::sym
