#pragma once

// Training batch norm on CUDA tracer tensors recorded as `native_batch_norm`, not cuDNN's.
//
// `aten::batch_norm` is a composite that picks a backend from its input: on CUDA, f32 and f16
// inputs go to `cudnn_batch_norm` (bf16 ones to `native_batch_norm`). A cuDNN batch norm is one
// opaque ATen call in the forward and another in the backward (`cudnn_batch_norm_backward`),
// between which its ReLU and its residual add run as kernels of their own, and whose output the
// min cut must save (it cannot be recomputed). `native_batch_norm` is what the tracer turns into
// staged sums and a pointwise normalization (rewrite/split_reduction.h), and its backward into sums
// and pointwise ops (rewrite/decompose_backward.h), all fused with their neighbours, so that the
// activations around a batch norm need not all be kept for the backward.
//
// So on AutogradPrivateUse1 (tracer tensors, above autograd, so NativeBatchNormBackward is what
// autograd records), a call in training mode on a CUDA tensor calls `native_batch_norm`, when
// EMBER_CUDNN_BATCH_NORM=0. Every other call runs the composite unchanged.
//
// Off by default: with the batch-norm backward decomposed too (Note [Batch-norm backward],
// decompose_backward.h) it makes training slower than cuDNN's kernels, and it halves the
// activations held for the backward but not the peak, which comes in the backward. It has not
// been timed on its own (figures in docs/benchmarks.md).

// Note [cuDNN statistics, ember's normalization]
// With cuDNN's batch norm, its output y is an extern's result: the min cut must save it whenever
// the backward reads it or a value computed from it (the ReLU's output, which the next
// convolution's weight gradient and the ReLU's mask read), which puts a CNN's training peak
// above eager's. With EMBER_CUDNN_BATCH_NORM=stats, a training-mode `cudnn_batch_norm` is
// recorded as it is (cuDNN's statistics, running-statistics update and backward), but the output
// the program sees is ember's own
//     y = (x - save_mean) * (save_invstd * w) + b      (f32, rounded once to x's dtype)
// from cuDNN's saved mean and inverse deviation: pointwise in x, which cuDNN's backward saves
// anyway, so the ReLU after it fuses into it and the backward recomputes it instead of keeping
// it. cuDNN still writes its own y (dead). Autograd is unchanged: the op's backward node is
// cuDNN's, and y has the op's own gradient. The default, since it brings the training peak below
// eager's (figures, step times included, in docs/benchmarks.md); EMBER_CUDNN_BATCH_NORM=1 keeps
// cuDNN's output.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>

namespace ember::rewrite {

/// Registers the rewrite. Idempotent; called by register_rewrite_kernels (rewrites.h).
void register_batch_norm_rewrite();

/// What Note [cuDNN statistics, ember's normalization] needs of a cuDNN batch norm.
struct CudnnNormalization {
  at::Tensor x;
  std::optional<at::Tensor> weight, bias;
};

/// The inputs of `op` called with the arguments on top of `stack` when it is a training-mode
/// `aten::cudnn_batch_norm` on a CUDA tracer tensor, unless EMBER_CUDNN_BATCH_NORM is set to
/// something other than `stats`; else nullopt.
std::optional<CudnnNormalization> cudnn_normalization(const c10::OperatorHandle& op,
                                                      const torch::jit::Stack& stack);

/// Replaces the output on `stack`, which holds the recorded op's four results on top (y,
/// save_mean, save_invstd, reserve), by ember's normalization of `n.x`.
void normalize_from_statistics(const CudnnNormalization& n, torch::jit::Stack* stack);

}  // namespace ember::rewrite
