/// \file
/// 2D nearest and bilinear upsampling (`F.interpolate`, `nn.Upsample`) as index functions
/// (index_ops.h): an output element reads one input element (nearest) or four, weighted
/// (bilinear), so the resize fuses with the kernel that makes its input and the one that reads
/// it instead of an ATen call over a realized input (CoaT's bilinear upsampling of its serial
/// blocks' maps ran as ATen's NHWC f32 kernel: 2.4 ms of a 25 ms step on an H100).
/// index_ops.cpp dispatches here. See docs/design/scheduler.md ("Upsampling").
///
/// Nearest: the source row of output row `o` is eager's `min(floor(o * scale), in - 1)` with
/// `scale` eager's f32 (`1 / scales_h` when given, else in / out). It is computed here for every
/// `o` (the sizes are constants) and must equal `(o * a) // b` for a ratio a/b taken from the
/// sizes or the scale: the kernel computes that in integers, exactly eager's row. A resize whose
/// rows follow no such ratio stays an ATen call.
///
/// Bilinear: eager's source coordinate `src = max(scale * (o + 0.5) - 0.5, 0)` (align_corners:
/// `scale * o`, scale = (in - 1) / (out - 1)), its floor `i0`, `i1 = i0 + (i0 < in - 1)`,
/// `l1 = src - i0`, `l0 = 1 - l1`, in f32 in the kernel; the four elements are weighted as eager's
/// CUDA kernel does (`l0h * (l0w * x00 + l1w * x01) + l1h * (l0w * x10 + l1w * x11)`) in the
/// compute type (f32 for halves) and rounded once. The interpolation is continuous in src, so a
/// last-bit difference in src (a contracted multiply-add) moves the result by about as much.
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "loop/expr.h"
#include "sched/index_ops.h"

namespace ember::sched {

/// True when `n` is `upsample_nearest2d` or `upsample_bilinear2d` over a 4D input of f32, f64,
/// bf16 or f16 with constant sizes, the output sizes its output_size argument gives, and (for
/// nearest) rows and columns that follow a ratio (above). Bilinear: not f64, and over an input
/// whose rows are not contiguous (channels-last): over NCHW the C++ kernels computed each
/// column's taps as scalar gathers, twice eager's time. Conservative; never throws for a
/// verifier-valid graph. Does not check devices.
bool is_upsample(const graph::Graph& g, const graph::Node& n);

/// Input elements one output element reads (the scheduler's cost of one): 1 or 4.
int64_t upsample_reads(const graph::Graph& g, const graph::Node& n);

/// The output of upsample `n` at `index`. Requires is_upsample.
loop::Expr lower_upsample(const graph::Graph& g, const graph::Node& n, const Index& index,
                          ElementReader& reader);

}  // namespace ember::sched
