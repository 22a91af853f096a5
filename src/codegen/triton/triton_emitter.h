/// \file
/// Emits a loop-IR Kernel as the source of one Triton kernel (the GPU backend's code
/// generator; docs/design/triton_codegen.md).
///
/// The emitted module defines `<name>` (an `@triton.jit` function) and the helpers it uses. Its
/// arguments are the kernel's buffer parameters in order (element pointers, `b_<buffer>`), then
/// its size variables in order (`s_<size>`), then one block size, a `tl.constexpr` (`XBLOCK` or
/// `RBLOCK`). The grid is one-dimensional (triton_programs).
///
/// A combo kernel (loop::Kernel::combo) is one kernel whose programs are split among its parts:
/// each part is a jit function of its own (a flat nest, or scalar code for 0-dim values) taking
/// its program index among the part's programs, and the kernel calls the part whose range of
/// program ids holds its own (ranges of ceil(elements / XBLOCK) programs, in part order).
///
/// Otherwise two forms, chosen from the kernel's loop structure:
///  - Flat: a perfect loop nest whose innermost body only binds values and stores (pointwise).
///    The nest is flattened; program p handles elements [p * XBLOCK, (p + 1) * XBLOCK) of it,
///    masked at the end, and recovers each loop variable by division and modulo.
///  - Rows: the loops of the outer perfect nest become programs (one program per iteration of
///    them). Below them, straight-line statements run on scalars, and each inner loop with a
///    straight-line body runs as a loop over blocks of RBLOCK iterations: loads and stores are
///    masked, and an Accumulate into an element that does not depend on the inner loop keeps a
///    block of partial results that is reduced (tl.sum, or tl.reduce with a NaN-propagating
///    max/min) and combined into the accumulator after the loop.
///
/// Semantics kept from expr.h: f16 and bf16 arithmetic computed in f32 and rounded at every node;
/// IEEE division and square root (div_rn, sqrt_rn); NaN-propagating min and max; Python floor
/// division and modulo; a Load under a Select arm is masked by that arm's condition; indices are
/// i64. The output is deterministic.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loop/eval.h"
#include "loop/stmt.h"
#include "support/options.h"

namespace ember::codegen {

struct TritonKernel {
  /// Tiled: a flat nest with a transposing read, run as 2D tiles of XBLOCK x XBLOCK elements over
  /// its innermost loop (axis 1) and the loop the read is contiguous along (axis 0); the other
  /// loops are scalars per program.
  /// Combo: the parts of a combo kernel (loop::Kernel::combo), each a flat nest or scalar code,
  /// one after another along the grid: part i has ceil(part_extents[i] / XBLOCK) programs.
  enum class Form { Flat, Rows, Tiled, Combo };
  std::string name;    ///< the @triton.jit function's name
  std::string source;  ///< a Python module defining it
  /// The loop kernel's size variables, in order: i64 arguments after the buffers.
  std::vector<std::string> size_vars;
  Form form = Form::Flat;
  /// Rows: the number of programs; Flat: the number of elements, in programs of XBLOCK; Tiled:
  /// the programs per tile (the product of the untiled loops); Combo: the parts' elements
  /// together. Over the kernel's size variables.
  loop::Expr grid_extent;
  /// Combo: each part's elements (1 for scalar code), in order.
  std::vector<loop::Expr> part_extents;
  /// Tiled: the extents of the loops along axis 1 and axis 0 of a tile.
  loop::Expr tile_cols, tile_rows;
  /// What the block size divides: the flattened nest's element count (Flat) or the longest inner
  /// loop's extent (Rows; an IntImm 1 when there is no inner loop). The launcher picks the block
  /// size from its value: a power of two, at most `max_block`.
  loop::Expr block_extent;
  int max_block = 1024;
  /// The block size's parameter name: "XBLOCK" or "RBLOCK".
  std::string block_param;
  /// Program ids and lanes are i32, not i64: the kernel's sizes are constant and every buffer
  /// offset is below 2^30 (issue 7: i32 indexing where sizes provably fit).
  bool int32_indices = false;
  /// Rows: the rows each program handles by default (a row tile of short rows: the grid is the
  /// rows over this, rounded up); 1 otherwise.
  int rows_per_program = 1;
  /// A row tile's second constexpr, the rows per program ("XBLOCK", tuned with the warps:
  /// triton_configs.h); "" for a kernel with one row per program or another form.
  std::string rows_param;
  /// Private buffers (emit_triton) the kernel neither reads nor writes: every store to them was
  /// dropped. The launcher may pass any pointer for them (the executor allocates nothing).
  std::vector<std::string> unused_buffers;
  /// Per buffer argument, in order: whether the kernel may write it (an output or inout).
  std::vector<bool> written;
  /// Launched on buffers whose addresses are multiples of 16 bytes, which the compiler may assume
  /// (CompileOptions::Triton::aligned_pointers, Note [Buffers aligned to 16 bytes]).
  bool aligned = true;
};

/// The Triton kernel of `k`, or nullopt with the reason in `why` when its structure has no Triton
/// form yet (nested inner loops, allocations of more than one element, shifts, Welford and
/// argmax reductions, conditionals inside an inner loop).
///
/// `private_buffers` names output buffers that nothing reads after the kernel (sched's
/// private_outputs: a softmax's f32 result that only its fused cast to bf16 reads). When the
/// program reads none of them back from memory (a persistent row keeps what it stored in
/// registers), their stores are dropped and they are listed in TritonKernel::unused_buffers.
/// `options` (support/options.h): `persistent` off, row programs always loop over blocks.
std::optional<TritonKernel> emit_triton(const loop::Kernel& k, std::string* why,
                                        const std::vector<std::string>& private_buffers = {},
                                        const CompileOptions::Triton& options = {});

/// The body of pointwise kernel `k` as the epilogue of a matrix-product template
/// (triton_matmul.h): the statements of its flat form, which expect `lin` (the offsets of the
/// template's tile in the product's memory, a [BLOCK_M, BLOCK_N] block), `xmask` (the tile's mask)
/// and `acc_c` (the tile of the product in its dtype) and name k's buffers `b_<name>`. Every read
/// of input buffer `product` must be at the nest's own row-major element (so the product is
/// dense in the nest's order, and `lin` recovers the loop variables); nullopt with the reason in
/// `why` otherwise, or when k is not a flat nest of constant loops.
std::optional<std::string> emit_triton_epilogue(const loop::Kernel& k, const std::string& product,
                                                std::string* why);

/// The block size a launcher uses for `extent` iterations: the next power of two, at least 16
/// and at most `max_block`.
int triton_block_size(int64_t extent, int max_block);

/// The launch of `k` for the sizes `sizes`: its block size and number of programs.
struct TritonLaunch {
  int block = 16;
  int64_t programs = 1;
};
TritonLaunch triton_launch(const TritonKernel& k, const loop::Bindings& sizes);

/// The number of programs of `k` at `sizes` with block size `block` and, for a row tile,
/// `rows` rows per program (0: its default).
int64_t triton_programs(const TritonKernel& k, const loop::Bindings& sizes, int block,
                        int rows = 0);

}  // namespace ember::codegen
