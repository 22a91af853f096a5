/// \file
/// 2D max and average pooling as index functions (index_ops.h): an output element is a fold over
/// its window of input elements, read through an ElementReader, so a pool fuses with the kernel
/// that makes its input (ResNet's conv -> bn -> relu -> max pool) and the one that reads it,
/// instead of an ATen call over a realized input (ATen's NHWC pools take a sizeable share of a
/// CNN's time on CUDA). index_ops.cpp dispatches here.
/// See docs/design/scheduler.md ("Pooling").
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "loop/expr.h"
#include "sched/index_ops.h"

namespace ember::sched {

/// Windows larger than this stay ATen calls.
constexpr int64_t kMaxPoolWindow = 64;

/// True when `n` is a pool that lower_pool supports:
///  - `max_pool2d_with_indices` whose indices (output 1) nothing reads;
///  - `avg_pool2d` with every window's divisor the same (divisor_override, or count_include_pad
///    with no window past the padded input) or count_include_pad false;
/// over a 3D or 4D input of f32, f64, bf16 or f16 with constant sizes, a window of at most
/// kMaxPoolWindow elements, and the output sizes eager gives. Conservative; never throws for a
/// verifier-valid graph. Does not check devices.
bool is_pool(const graph::Graph& g, const graph::Node& n);

/// Window elements of pool `n` (the scheduler's cost of one output element).
int64_t pool_window(const graph::Graph& g, const graph::Node& n);

/// Output 0 of pool node `n` at `index`. Max: the NaN-propagating maximum of the window's
/// elements inside the input (padding is -inf), in the input's dtype. Average: the window's
/// elements inside the input summed in the compute type (f32 for halves), row by row as eager,
/// divided by eager's divisor, rounded once. Requires is_pool.
loop::Expr lower_pool(const graph::Graph& g, const graph::Node& n, const Index& index,
                      ElementReader& reader);

}  // namespace ember::sched
