#pragma once

// Backward ops recorded as the ops the scheduler fuses.
//
// Autograd's derivative formulas call ATen's backward kernels: `threshold_backward` for a ReLU,
// `gelu_backward`, `native_layer_norm_backward`, `_softmax_backward_data`, ... The scheduler
// lowers none of them, so a joint graph would run each as an ATen call between its fused kernels:
// a ReLU's backward would read and write a whole activation on its own, and a linear layer's bias
// gradient could not fuse with the activation gradient it sums. Inductor decomposes them; so does
// the tracer here, when it records one on tracer tensors, into pointwise ops and sums that the
// scheduler already fuses (and, on CUDA, splits: rewrite/split_reduction.h).
//
// Numerics are eager's: half and bfloat16 operands are computed in f32 and the results rounded
// once to the op's result dtype, as its kernels do with their opmath type.
//
//   threshold_backward(g, x, t)          where(x <= t, 0, g)
//   hardtanh_backward(g, x, lo, hi)      where(x <= lo or x >= hi, 0, g)
//   leaky_relu_backward(g, x, s, _)      where(x > 0, g, g * s)
//   gelu_backward(g, x, "none")          g * (Phi(x) + x * phi(x))
//   gelu_backward(g, x, "tanh")          g * (0.5 (1 + t) + 0.5 x (1 - t^2) k' (1 + 3 c x^2)),
//                                        t = tanh(k' (x + c x^3))
//   silu_backward(g, x)                  g * s (1 + x (1 - s)), s = sigmoid(x)
//   sigmoid_backward(g, y)               g * (1 - y) * y
//   tanh_backward(g, y)                  g * (1 - y^2)
//   hardsigmoid_backward(g, x)           where(-3 < x < 3, g / 6, 0)
//   hardswish_backward(g, x)             where(x <= -3, 0, where(x < 3, g (x / 3 + 0.5), g))
//   softplus_backward(g, x, b, t)        where(x b > t, g, g z / (z + 1)), z = exp(x b)
//   nll_loss_backward(g, x, t, None, r, i, w)  where(t[:, None] == arange(C) and t != i, -g / w, 0)
//                                        (-g for a sum, -g[:, None] for none)
//   slice_backward, select_backward      zeros(sizes).slice_scatter(g, ...), .select_scatter
// and, on CUDA (or with EMBER_DECOMPOSE_BACKWARD=all, for the CPU tests), the reductions:
//   _softmax_backward_data(g, y, d, _)      y * (g - sum_d(g * y))
//   _log_softmax_backward_data(g, y, d, _)  g - exp(y) * sum_d(g)
//   native_layer_norm_backward              x^ = (x - mean) rstd, gw = g * w:
//       dx = rstd / N * (N gw - sum(gw) - x^ sum(gw x^)),  dw = sum_rows(g x^),  db = sum_rows(g)
//   convolution_backward(..., mask)         its bias's gradient as sum(g) over every dim but 1,
//       the rest cuDNN's (mask[2] false); ConvNeXt-T's depthwise biases, for instance
// The CPU keeps ATen's kernels for these (they are fast there, and ember's own reductions over
// rows are not faster). With EMBER_DECOMPOSE_BACKWARD=all only (every device):
//   native_batch_norm_backward (training)   x^ = (x - mean) invstd, over every dim but 1:
//       dx = (g - mean(g) - x^ mean(g x^)) invstd w,        dw = sum(g x^),     db = sum(g)
//   native_batch_norm_backward (eval)       dx = g rsqrt(running_var + eps) w
//
// Note [Batch-norm backward]: not decomposed by default. ATen's kernel reads the activation
// gradient once for both per-channel sums; decomposed, they are column reductions of that
// gradient in stages, which make CNN training slower and its compile longer (figures in
// docs/benchmarks.md). Decomposed, the two sums are recorded side by side
// (rewrite::record_sums_side_by_side) and run as one kernel per stage (Note [Sibling reductions]
// in sched/reduction_fusion.cpp), which reads g's chain and x once.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::rewrite {

// Three rows of the rewrite table (rewrites.cpp), one per device predicate: each records `op`
// called with the arguments on top of `stack` (tracer tensors) as its decomposition, replacing
// the arguments with its results, and returns true; or returns false and leaves the stack alone
// when the call is recorded as it is. None checks the device: the table's predicate did.

/// The pointwise backward ops, nll_loss_backward, slice_backward and select_backward: every
/// device.
bool record_pointwise_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// The reductions (_softmax_backward_data, _log_softmax_backward_data,
/// native_layer_norm_backward, convolution_backward's bias): CUDA, or every device with
/// trace.decompose_backward_everywhere.
bool record_reduction_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// native_batch_norm_backward: only with trace.decompose_backward_everywhere (every device).
bool record_batch_norm_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace ember::rewrite
