#pragma once

// Split reductions: a reduction with few results and many elements per result, on CUDA,
// recorded as two reductions, so that its work spreads over the whole device.
//
// A reduction kernel runs one program per result (a row). With 8 rows of two million elements
// each (ConvTasNet's global layer norm, GroupNorm(1, 512) over 4001 time steps, batch 8) eight
// programs do all the work while the other SMs idle, far slower than the bytes need and than
// eager's own kernel. Such a call is recorded as sums over the input's inner dims first (one
// partial per channel: 4096 rows of 4001) and then over the partials (8 rows of 512), each a
// kernel with enough programs, the partial sums' prologue and the normalization's epilogue fused
// as usual.
//
//   native_group_norm(x, w, b, N, C, HxW, G, eps), x contiguous, on CUDA, N * G < 256 rows,
//   C / G >= 8 channels per group, N * C >= 1024, (C / G) * HxW >= 2^16 elements per row:
//     xf   = x.view(N, G, C/G, HxW) in x's compute type (f32 for halves)
//     mean = xf.sum(-1).sum(-1) / R                     R = (C/G) * HxW
//     rstd = rsqrt(((xf - mean)^2).sum(-1).sum(-1) / R + eps)
//     out  = x * a + (b - a * mean),  a = rstd * w       (eager's form of the affine map)
//   with mean and rstd returned in x's dtype, as eager's [N, G] outputs.
//
// Two passes for the variance, as ember's own group norm kernel (eager uses Welford); the sums
// of partials are at least as accurate as one running sum per row.
//
// The same for plain reductions:
//   - sum, mean, amax, amin over the trailing dims of a contiguous tensor with fewer than 256
//     results and at least 2^18 elements per result: partials over a divisor of the row, then
//     their reduction (f32 partials for halves).
//   - sum and mean over the leading dims in memory order (column reductions: a linear layer's
//     bias gradient `g.sum(0)`, the per-channel sums of a channels-last tensor): the scheduler's
//     column kernel runs one program per 256 kept elements over every row, so with few kept
//     elements the rows are split into about 1024 programs' worth of partials (a divisor of the
//     rows, at least 32 rows each), then summed. A reduction over a run of inner dims too (the
//     batch and the H x W of an NCHW tensor) sums the inner run as rows first. A kept run in
//     front of the reduced one is a batch of such columns, each split alike: the global average
//     pool of a channels-last activation (squeeze-and-excitation's `x.mean((2, 3))`, [N][H W][C]
//     in memory) ran one program per sample and 256 channels, 48 for NFNet-F4's 8 x 1536 x 32 x
//     32, each over 1024 rows (8.6 ms of its 36 ms step on an H100 in one such kernel). Rows
//     with no divisor in range (a prime count) are summed as they are.
//   - training batch norm (`_native_batch_norm_legit_functional`, training=True) on CUDA with at
//     least 256 rows (N x H x W): its
//     statistics as the staged sums above, in one pass (the sums of d = x - k and d^2 side by
//     side, k the channel's first element: var = mean(d^2) - mean(d)^2, which cancels few bits
//     since mean(d) is of the order of the deviation), `out = (x - mean) * (invstd * w) + b`
//     (eager's form),
//     the running statistics updated with the unbiased variance, save_mean and save_invstd in
//     the dtypes of the op's meta kernel. ember's own batch-norm kernel over a channels-last
//     input is a column reduction with one program per 256 channels (a few programs for the
//     whole device).
// EMBER_SPLIT_REDUCTIONS=all applies the splits on every device (tests compare them with eager on
// the CPU).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <vector>

namespace ember::rewrite {

/// Records `op` called with the arguments on top of `stack` (tracer tensors) as a split
/// reduction, replacing the arguments with its results, and returns true; or returns false and
/// leaves the stack alone when the call is recorded as it is. On CUDA, or on every device with
/// trace.splits_everywhere: the table's device predicate, not checked here.
bool record_split_reduction(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// The sums of each of `xs` (tracer tensors of one shape) over `dims` in `acc`, recorded
/// next to each other: split in stages as above where a sum of x would be (on CUDA, or on every
/// device with trace.splits_everywhere: this checks x's device itself, for the rewrites of other
/// predicates that call it), stage by stage for
/// all of them, so that the scheduler folds the sums of each stage into one kernel, which reads
/// what their inputs share once (Note [Sibling reductions] in sched/reduction_fusion.cpp).
/// Batch norm's statistics and its backward's two sums.
std::vector<at::Tensor> record_sums_side_by_side(std::vector<at::Tensor> xs,
                                                 const std::vector<int64_t>& dims,
                                                 at::ScalarType acc);

}  // namespace ember::rewrite
