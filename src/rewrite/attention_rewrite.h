#pragma once

// Rewrites of scaled_dot_product_attention calls on tracer tensors, made before the op's
// composite decomposition picks a backend.
//
// A boolean mask whose last dimension is broadcast (stride 0, more than one key) says, for each
// query row, either "attend to every key" or "attend to none". transformers builds such a mask
// under compilation for a bidirectional model with no padding (`q_idx >= 0` expanded over the
// keys), where eager passes no mask at all. The fused CUDA kernels need a mask whose last stride
// is 1, so CUDA's own choice for it is the math decomposition (matmul, a where over the mask,
// _safe_softmax, matmul), several times slower than flash attention. Such a call is recorded as
//
//     where(mask[..., :1], scaled_dot_product_attention(q, k, v, mask=None), 0)
//
// which is exact: a row that attends to every key is attention without a mask, and a row that
// attends to none is 0, as the math path's _safe_softmax makes it. Every other call runs the
// op's own decomposition unchanged.
//
// Note [f32 attention on CUDA]: with no mask, f32 attention on CUDA is the memory-efficient
// kernel (flash takes halves only), which multiplies in f32 on the CUDA cores. With TF32
// products allowed (the benchmark's setting, as PyTorch's harness), the math form is faster:
// its two batched products run on the tensor cores, and the scheduler fuses the scale and the
// softmax (and, in training, the softmax's backward) into one kernel each (Inductor, which keeps
// the math decomposition CUDA picks for the mask, runs it so too). So an f32 row-mask call on
// CUDA with TF32 allowed and no dropout is recorded as
// `where(row, _scaled_dot_product_attention_math(q, k, v), 0)` (its attention weights are saved
// for the backward: [batch, heads, queries, keys] floats, as Inductor's).

namespace ember::rewrite {

/// Registers the rewrite for `AutogradPrivateUse1` (tracer tensors, above autograd, so the
/// decomposition still records backward ops). Idempotent; called by register_rewrite_kernels
/// (rewrites.h).
void register_attention_rewrite();

}  // namespace ember::rewrite
