#pragma once

// Training batch norm on CUDA tracer tensors recorded as `native_batch_norm`, not cuDNN's.
//
// `aten::batch_norm` is a composite that picks a backend from its input: on CUDA, f32 and f16
// inputs go to `cudnn_batch_norm` (bf16 ones to `native_batch_norm`). A cuDNN batch norm is one
// opaque ATen call in the forward and another in the backward (`cudnn_batch_norm_backward`),
// between which its ReLU and its residual add run as kernels of their own, and whose output the
// min cut must save (it cannot be recomputed). `native_batch_norm` is what the tracer turns into
// staged sums and a pointwise normalization (tracer/split_reduction.h), and its backward into sums
// and pointwise ops (tracer/decompose_backward.h), all fused with their neighbours. In the first
// fp32 GPU training run, ResNet-50 took 45.6 ms per step against Inductor's 36.7, and MobileNetV2
// kept twice the activations Inductor keeps.
//
// So on AutogradPrivateUse1 (tracer tensors, above autograd, so NativeBatchNormBackward is what
// autograd records), a call in training mode on a CUDA tensor calls `native_batch_norm`. Every
// other call runs the composite unchanged.

namespace ember::tracer {

/// Registers the rewrite. Idempotent; called by register_tracer_kernels.
void register_batch_norm_rewrite();

}  // namespace ember::tracer
