/// \file
/// Splitting a loop where the selects in its body change arm: a concatenation along a loop's
/// dimension is `select(i < 32, a[i], select(i < 64, b[i - 32], ...))`, which a vectorizing
/// backend must run as a blend of every arm, each read clamped into its buffer (a gather), for
/// every element. Split at 32 and 64, each piece's selects fold to one arm, and each piece reads
/// one buffer contiguously (index-set splitting, as Halide's loop partitioning).
///
/// Requires: a verifier-valid statement.
/// Guarantees:
///  - A Serial, Vectorized or Unrolled For with constant min and extent whose body holds a Select
///    whose condition is, or joins with && and ||, comparisons `v < c`, `v <= c`, `c < v` or
///    `c <= v` (v its variable, c a constant; a padding's `2 <= v && v < 34`), each changing value
///    strictly inside the loop's range, becomes a Block of Fors of the same kind and variable
///    over consecutive ranges that cover the loop's, in order (at most kMaxPieces; a loop with
///    more split points is left alone). In each piece, every such comparison decided over the
///    whole piece is replaced by its value, and the &&, || and Selects it decides by what they
///    come to.
///  - Parallel loops, loops with other bounds, and selects over other conditions are left as
///    they are; the pass recurses into every loop's body.
///  - Iterations run in the same order, and each computes the arm it computed before: the same
///    values. Deterministic.
#pragma once

#include "loop/stmt.h"

namespace ember::loop {

inline constexpr int kMaxPieces = 8;

Stmt split_loops_at_selects(const Stmt& s);

}  // namespace ember::loop
