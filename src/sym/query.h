/// \file
/// Questions about symbolic expressions answered from the symbols' ranges alone, without a
/// guard: "statically known" means true for every value the ranges of the ShapeEnv allow. A
/// false answer means "not known", never "known false" (ask about the negation for that).
#pragma once

#include <cstdint>

#include "sym/expr.h"
#include "sym/shape_env.h"

namespace ember::sym {

enum class Rel : uint8_t { EQ, NE, LT, LE, GT, GE };
/// "==", "!=", "<", "<=", ">", ">=".
const char* rel_name(Rel r);

/// Whether `a rel b` holds for every binding in the ranges of `env`: decided from the range of
/// simplify(a - b) (range.h, simplify.h), narrowed for min and max terms (so `min(x, y) <= x` is
/// known; Note [Min and max in differences] in query.cpp). Sound: true only when it always holds.
bool statically_known_true(const SymExpr& a, Rel rel, const SymExpr& b, const ShapeEnv& env);

/// Whether `e % k == 0` for every binding in the ranges of `env` (k != 0, else UserError):
/// simplify(e % k) is the constant 0, or its range is [0, 0].
bool statically_known_multiple_of(const SymExpr& e, int64_t k, const ShapeEnv& env);

}  // namespace ember::sym
