/// \file
/// Triton matrix-product templates, the kernels `mode="max-autotune"` times against cuBLAS
/// (issue 7): C[b] = A[b] @ B[b] (+ bias), accumulated in f32 by `tl.dot` over tiles of
/// BLOCK_M x BLOCK_N, rounded once to C's dtype, as cuBLAS does. Sizes and strides are constants
/// of the source (the executor's graphs have static shapes), so Triton specializes on them.
///
/// The emitted module defines `<name>(a, b[, bias], c, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)`, the
/// last four `tl.constexpr`; the grid is (ceil(M / BLOCK_M) * ceil(N / BLOCK_N), batch). Programs
/// walk the output tiles in groups of GROUP_M rows of tiles (the L2-friendly order of Triton's
/// tutorial), each loading A and B in masked tiles of BLOCK_K along K.
///
/// Numerics: bf16 and f16 operands multiply exactly into f32 (`tl.dot` accumulates in f32); f32
/// operands use TF32 when `allow_tf32` (torch.backends.cuda.matmul.allow_tf32), IEEE f32 otherwise;
/// a bias is added to the f32 sum before the one rounding (cuBLAS's epilogue, and its beta = 1
/// form). The order of accumulation differs from cuBLAS's, as between any two GEMM kernels.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loop/dtype.h"

namespace ember::codegen {

/// A as a 2D convolution's input (an implicit GEMM): row m = (n, oh, ow) and column k = (kh, kw,
/// c), c fastest, read x[n, c, oh * stride_h - pad_h + kh * dil_h, ow * stride_w - pad_w + kw *
/// dil_w], zero outside x, at x's element strides (n, c, h, w). B is then the weight [O, C, KH, KW]
/// in channels-last memory, whose (kh, kw, c) order is k's: [K, O] at strides (1, KH * KW * C).
/// Grouped: `channels` is a group's, batch b is group b (its input channels from b * channels,
/// its weight rows and result channels from b * O / groups).
struct ConvOperand {
  int64_t channels = 0, height = 0, width = 0, kh = 1, kw = 1, out_h = 1, out_w = 1;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  std::array<int64_t, 4> x_strides{};  ///< n, c, h, w
};

/// One matrix product: per batch b, C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] (+ bias[b, m, n]).
/// Strides are in elements, (batch, rows, cols) of each operand; 0 where it broadcasts (a bias
/// row shared by all rows: stride 0 along m). With `conv`, A is a convolution's input gathered
/// (ConvOperand; a_strides unused; batch: the groups).
struct MatmulSpec {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  loop::DType a_dtype = loop::DType::Float32, b_dtype = loop::DType::Float32;
  loop::DType out_dtype = loop::DType::Float32;
  std::array<int64_t, 3> a_strides{}, b_strides{}, out_strides{};
  std::optional<loop::DType> bias_dtype;  ///< absent: no bias
  std::array<int64_t, 3> bias_strides{};
  bool allow_tf32 = false;
  std::optional<ConvOperand> conv;
};

/// A launch configuration of a template: tile sizes, the grouping of tile rows, warps and
/// software-pipelining stages.
struct MatmulConfig {
  int block_m = 64, block_n = 64, block_k = 32, group_m = 8, num_warps = 4, num_stages = 3;
  bool operator==(const MatmulConfig&) const = default;
};

/// Whether the template computes `s`: dtypes f32, bf16 or f16 (A and B alike; C of their dtype,
/// or f32), sizes at least 1, every offset below 2^31. `why` says what is not.
bool matmul_supported(const MatmulSpec& s, std::string* why);

/// A pointwise kernel fused after the product (`mode="max-autotune"`'s fused epilogues): instead of
/// storing C, the template runs `body` (emit_triton_epilogue) on its tile, which reads the
/// product rounded to C's dtype as `acc_c` and writes the kernel's own outputs.
struct MatmulEpilogue {
  std::vector<std::string> buffers;  ///< the kernel's buffer parameters, in order
  std::string body;
};

/// The Triton module of the template for `s`, its kernel named `name`. Deterministic. Requires
/// matmul_supported(s). With an epilogue, its parameters are `b_a, b_b[, b_bias]`, then the
/// epilogue's buffers `b_<name>` (the product's own slot among them is never dereferenced),
/// then the constexprs; C is not stored.
std::string emit_triton_matmul(const MatmulSpec& s, const std::string& name,
                               const MatmulEpilogue* epilogue = nullptr);

/// The configurations worth timing for `s`, the first a default: tiles of 128 x 128 (8 warps),
/// 64 x 128, 128 x 64, 64 x 64 and 32 x 32, K tiles of 32 or 64, each tile edge at most the next
/// power of two of its size (at least 16), duplicates dropped. `small` (a launch-bound product:
/// few tiles, so more programs matter more than larger tiles): those of 64 x 64 and 32 x 32
/// first, no 128 x 128.
std::vector<MatmulConfig> matmul_configs(const MatmulSpec& s, bool small = false);

/// The grid of `s` under `c`: (programs along axis 0, batch).
std::array<int64_t, 2> matmul_grid(const MatmulSpec& s, const MatmulConfig& c);

}  // namespace ember::codegen
