/// \file
/// Depthwise 2D convolutions (one input channel per group: MobileNet's, EfficientNet's,
/// ShuffleNet's and ConvNeXt's k x k convolutions) as index functions (index_ops.h): an output
/// element is a weighted fold over its window of one input channel, read through an
/// ElementReader, as a pool's is (pooling.h). The convolution then runs inside the kernel that
/// reads its result (its batch norm and activation, a squeeze-and-excitation pool) instead of as a
/// cuDNN or oneDNN call over a realized input and output: one launch fewer per convolution, and
/// no library call from the host (a cuDNN convolution costs 15-20 us of host time a call on an
/// H100's host, a generated kernel's launch about 2: at batch 1 the host is what a mobile net
/// waits on). index_ops.cpp dispatches here; ScheduleOptions::depthwise_convolutions says whether
/// the scheduler takes them (CompileOptions::Sched::depthwise_convolutions,
/// EMBER_DEPTHWISE_KERNELS: Triton graphs only, and off by default). See docs/design/scheduler.md
/// ("Depthwise convolutions").
///
/// Note [Depthwise kernels, measured]
/// On an H100 (bf16 inference, session 66, one machine, on against off) the kernels lose on the
/// device: at the harness's batch sizes mobilenetv3_large_100 13.46 ms against 11.11 (batch 512),
/// efficientnet_b0 7.98 / 6.33 (128), convnext_tiny 39.14 / 15.01 (128, 7x7), convmixer_768_32
/// 99.25 / 22.36 (64, 7x7); at batch 1 the saved host time wins on the 3x3 and 5x5 nets
/// (efficientnet_b0 2.56 ms / 2.89, mobilenetv3 2.66 / 2.81) and loses on ConvNeXt (2.57 / 2.03).
/// The kernel is a flat loop over output elements: each element reads its window's kh * kw
/// inputs (coalesced along the channels) and as many weights, gathered at a stride of kh * kw
/// between neighbouring channels, with no reuse of either between neighbouring outputs, where
/// cuDNN's kernels keep a tile of the input and the weights in shared memory and registers.
/// What would make it pay: weights read tap-major (channels contiguous, a parameter kernel's
/// cached copy), and a tiled form that reuses each input row across the window.
///
/// Values: the window's products summed in the compute type (f32 for halves, else the dtype),
/// row by row, the bias added last, rounded once to the output dtype. cuDNN and oneDNN sum in f32
/// too, in an order of their own: results agree to the dtype's rounding, not bit for bit.
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "loop/expr.h"
#include "sched/index_ops.h"

namespace ember::sched {

/// Windows larger than this stay ATen calls (ConvMixer's 9x9 convolutions: cuDNN's kernels, timed
/// per layout by the tracer, are the better choice there).
constexpr int64_t kMaxDepthwiseWindow = 64;

/// True when `n` is an `aten::convolution` that lower_depthwise_convolution supports: not
/// transposed, a 4D input [N, C, H, W] with groups == C, a weight [C * m, 1, kh, kw] (m output
/// channels per input channel) of at most kMaxDepthwiseWindow elements, an optional bias
/// [C * m], all of one floating dtype (f32, f64, bf16, f16) with the output's, constant sizes,
/// nonnegative padding, positive stride and dilation, and the output sizes eager gives.
/// Conservative; never throws for a verifier-valid graph. Does not check devices.
bool is_depthwise_convolution(const graph::Graph& g, const graph::Node& n);

/// Multiply-adds of one output element (the scheduler's cost of one): kh * kw.
int64_t depthwise_window(const graph::Graph& g, const graph::Node& n);

/// The output of depthwise convolution `n` at `index`. Requires is_depthwise_convolution.
loop::Expr lower_depthwise_convolution(const graph::Graph& g, const graph::Node& n,
                                       const Index& index, ElementReader& reader);

}  // namespace ember::sched
