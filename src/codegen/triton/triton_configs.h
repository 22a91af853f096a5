/// \file
/// Launch configurations of a generated Triton kernel worth timing: block sizes and warps
/// (issue 7: "block sizes and warps of generated kernels are autotuned"). The runtime compiles
/// each, times them on the kernel's own buffers at its first launch, keeps the fastest and
/// remembers it on disk (runtime/triton_tuning.h).
#pragma once

#include <vector>

#include "codegen/triton/triton_emitter.h"
#include "loop/eval.h"

namespace ember::codegen {

/// One launch configuration: the block size (XBLOCK or RBLOCK) and the warps per program.
struct TritonConfig {
  int block = 16;
  int num_warps = 4;
  /// A row tile's rows per program (its XBLOCK); 0 for other kernels.
  int rows = 0;
  bool operator==(const TritonConfig&) const = default;
};

/// Kernels touching fewer elements than this launch with their default configuration only:
/// their time is launch overhead, whatever the block.
constexpr int64_t kMinTunedElements = int64_t{1} << 21;

/// The configurations of `k` at `sizes`, the default first (triton_launch's block, 4 warps);
/// only the default for a kernel under kMinTunedElements elements.
///  - Flat: XBLOCK 1024, 512 and 256 with 4 warps, and 1024 with 8 (fewer elements per thread:
///    fewer registers for a kernel with many loads, such as a cat of several branches), never
///    above the elements' next power of two.
///  - Tiled: tiles of 32 x 32 with 4 warps, 64 x 64 with 8, 16 x 16 with 2.
///  - Rows: the block the launcher picks (a persistent row needs it whole, and block variables
///    need it at least as wide as their array), with 2, 4, 8 or 16 warps as its width allows.
///    A row tile also varies its rows per program: its default, twice and half that (1 to 64
///    rows, at most 8192 lanes), each with 4 and 8 warps.
std::vector<TritonConfig> triton_configs(const TritonKernel& k, const loop::Bindings& sizes);

}  // namespace ember::codegen
