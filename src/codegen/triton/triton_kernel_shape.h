/// \file
/// What the Triton emitter asks of a loop-IR kernel's shape (triton_emitter.h): which variables an
/// expression reads, whether statements hold loops or are straight-line, whether a row program
/// can hold each of its loops in one block, and whether i32 indices suffice.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "loop/stmt.h"

namespace ember::codegen::triton_shape {

/// Whether `e` reads a Var named in `vars` (any Var at all with `any`).
bool uses_any(const loop::Expr& e, const std::set<std::string>& vars, bool any = false);

/// Whether `s` contains a For.
bool has_loop(const loop::Stmt& s);

/// Whether `s` is straight-line: it only binds values and stores (a pointwise body), and with
/// `accumulates` also folds into accumulators (a reduction loop's body).
bool straight(const loop::Stmt& s, bool accumulates);

/// Whether every index of `k` fits in i32 with room to spare: constant sizes, and each buffer's
/// last element below 2^30, so sums and products of index terms stay below 2^31 (Triton's i32
/// arithmetic would wrap).
bool int32_indices(const loop::Kernel& k);

/// Row programs whose block loops are at most this long run each as one block.
constexpr int64_t kMaxPersistent = 4096;

/// Whether a row program (its statements below the program loops, `rest`) runs each block loop
/// as a single block, the row's loads kept in registers across loops: every loop is a block loop
/// of constant extent at most kMaxPersistent, and EMBER_TRITON_PERSISTENT is not 0.
bool persistent_form(const loop::Stmt& rest);

}  // namespace ember::codegen::triton_shape
