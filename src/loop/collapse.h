/// \file
/// Collapsing a pointwise loop nest: neighbouring loops that every index walks as one run become
/// one loop, so a code generator that flattens the nest (Triton's flat form) recovers fewer loop
/// variables by division and modulo. A contiguous [128, 72, 72, 384] kernel is one loop of
/// 254803968 iterations instead of four with three divisions and three remainders per element.
///
/// Requires: a verifier-valid statement.
/// Guarantees:
///  - Acts only on the outermost perfect nest of `s` (For directly inside For) whose innermost
///    body holds no loop; anything else comes back unchanged (the same node).
///  - Two neighbouring loops of the nest, outer `a` over [0, A) and inner `b` over [0, B), both
///    with constant bounds, merge into one loop `a` over [0, A * B) (the inner loop's kind), with
///    `a` read as `a // B` and `b` as `a % B` in the body, when the simplified body then has at
///    most one more floor division or remainder than before (a flattened nest spends one of each
///    per loop to recover its variables): every index reads them as `a * B * s + b * s`, which
///    recombines into `a * s`, or only one of them (a bias indexed by the inner loop reads
///    `a % B`). A transposing read (`b * A + a`) needs both and keeps its loops. Pairs are tried
///    from the innermost outwards until none merges.
///  - Iterations run in the same order as in the nest, so the result computes the same values.
///  - Deterministic.
#pragma once

#include <cstdint>

#include "loop/stmt.h"

namespace ember::loop {

Stmt collapse_loops(const Stmt& s);

/// Merging a reduction's short vector loop with the serial loop around it: a reduction row that
/// reads a few contiguous elements per step of a long serial loop (the 16 channels of a group of
/// a channels-last tensor, over every pixel: a group norm's or `x.var((2, 3, 4))`'s rows) would
/// run that loop serially with a vector of a few lanes and a tree reduction per step; merged,
/// the row is one vector loop of blocks as wide as the code generator's.
///
/// Requires: a verifier-valid statement.
/// Guarantees:
///  - Anywhere in `s`: a serial loop `a` over [0, A) whose body is exactly a vectorized loop `b`
///    over [0, B), both with constant bounds, B <= max_inner, whose body holds no loop and
///    accumulates, only into elements that neither variable picks (a reduction over both loops;
///    not a column reduction's accumulators, indexed by `b`), becomes one vectorized loop `a` over
///    [0, A * B) with `a` read as `a // B` and `b` as `a % B`. Repeats outwards while the merged
///    loop still qualifies (its extent at most max_inner).
///  - Iterations run in the nest's order; reductions may reassociate (stmt.h), so the values are
///    those of the nest up to the reassociation a vector loop already allows.
///  - Everything else is unchanged (the same nodes); deterministic.
Stmt collapse_reduction_nests(const Stmt& s, int64_t max_inner);

}  // namespace ember::loop
