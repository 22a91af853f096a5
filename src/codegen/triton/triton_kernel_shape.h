/// \file
/// What the Triton emitter asks of a loop-IR kernel's shape (triton_emitter.h): which variables an
/// expression reads, whether statements hold loops or are straight-line, whether a row program
/// can hold each of its loops in one block, and whether i32 indices suffice.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loop/stmt.h"
#include "loop/traverse.h"

namespace ember::codegen::triton_shape {

/// Whether `e` reads a Var named in `vars` (any Var at all with `any`).
bool uses_any(const loop::Expr& e, const std::set<std::string>& vars, bool any = false);

using loop::has_loop;  // whether a statement contains a For (loop/traverse.h)

/// Whether `s` is straight-line: it only binds values and stores (a pointwise body), and with
/// `accumulates` also folds into accumulators (a reduction loop's body).
bool straight(const loop::Stmt& s, bool accumulates);

/// Whether every index of `k` fits in i32 with room to spare: constant sizes, and each buffer's
/// last element below 2^30, so sums and products of index terms stay below 2^31 (Triton's i32
/// arithmetic would wrap).
bool int32_indices(const loop::Kernel& k);

/// For a flat (pointwise) nest whose innermost loop is `vars.back()`: the position in `vars` of
/// another loop along which some load of `body` is contiguous (stride 1) while it is strided
/// along the innermost one: a transposing read (a copy to channels-last, `x.t().contiguous()`),
/// which a 2D tile over both loops reads and writes coalesced. The loop with the most such loads;
/// nullopt when there is none or a load's index is not affine in the loop variables. Stores are
/// contiguous along the innermost loop, or some along one other loop, which is then the answer
/// (a value stored in two layouts: channels-last and its contiguous copy).
std::optional<size_t> transposed_read_loop(const std::vector<std::string>& vars,
                                           const loop::Stmt& body);

/// The default edge of a 2D tile (TritonKernel::Form::Tiled), and the shortest loop worth tiling.
constexpr int kTile = 32;
constexpr int64_t kMinTile = 16;

/// Row programs whose block loops are at most this long run each as one block.
constexpr int64_t kMaxPersistent = 4096;

/// Whether a row program (its statements below the program loops, `rest`) runs each block loop
/// as a single block, the row's loads kept in registers across loops: every loop is a block loop
/// of constant extent at most kMaxPersistent. (The emitter also asks CompileOptions::Triton.)
bool persistent_form(const loop::Stmt& rest);

/// The longest block loop of a persistent row program (persistent_form), or -1.
int64_t persistent_extent(const loop::Stmt& rest);

/// Rows a persistent row program handles at once (a row tile) when each row's block loops are
/// at most `extent` long and there are `rows` rows: short rows share a program, up to
/// kRowTileLanes lanes (RBLOCK x rows) and 32 rows, while at least kMinRowTilePrograms programs
/// remain; 1 for rows of more than 512 elements.
constexpr int64_t kRowTileLanes = 2048;
constexpr int64_t kMinRowTilePrograms = 1024;
int rows_per_program(int64_t rows, int64_t extent);

}  // namespace ember::codegen::triton_shape
