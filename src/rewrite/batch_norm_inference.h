#pragma once

// Batch norm in inference mode on CUDA, recorded as its per-channel affine map.
//
// On CUDA, eager's batch norm in eval mode is cuDNN's kernel (f32 and f16 inputs) or ATen's
// (bf16). ember's scheduler fuses native batch norm into the kernels around it as an index
// function (sched/batch_norm.h) that computes `1 / sqrt(var + eps)` for every element: with
// IEEE division and square root that is some 40 instructions per element, more than a memory-
// bound kernel has, so the kernels around a batch norm run below the memory's bandwidth. cuDNN's
// kernel on a channels-last f32 input first transposes it (tensorTransformGeneric).
//
// So `cudnn_batch_norm`, `native_batch_norm`, `_native_batch_norm_legit` (training false) and
// `_native_batch_norm_legit_no_training` on CUDA tracer tensors, when nothing requires grad,
// are recorded as
//
//     alpha = weight / sqrt(running_var + eps)     (per channel, in f32; f64 for f64)
//     beta  = bias - running_mean * alpha
//     out   = x * alpha[c] + beta[c]               (rounded once to x's dtype, x's layout)
//
// The per-channel terms cost more than the scheduler recomputes per element, so they become a
// small kernel of C elements, and the normalization is one fused multiply-add per element in
// whatever kernel reads it. The statistics outputs are empty, as eager's in eval mode.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::rewrite {

/// Records `op` called with the arguments on top of `stack` as the affine map above, replacing
/// the arguments with its results, and returns true; or returns false and leaves the stack alone.
bool record_batch_norm_inference(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace ember::rewrite
