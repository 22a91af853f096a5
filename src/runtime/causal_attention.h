/// \file
/// Attention under a constant causal mask, as `is_causal=True` with no mask.
///
/// Under compilation, transformers builds a decoder's causal mask as a tensor (the aranges of the
/// query and key positions compared, and'ed with a padding mask of ones when the caller passed
/// none), where eager asks whether the padding mask is all ones (a device sync) and then passes
/// no mask and `is_causal=True`. The fused attention kernels skip the blocks above the diagonal
/// for `is_causal` and read no bias; with the mask they compute every block and read a bias of
/// [B, 1, S, S], so a decoder with such a mask runs slower than eager.
///
/// A static mask depends on no input, so it is evaluated once at compile time: when it is the
/// causal pattern (query i attends to keys 0..i, the same for every batch element and head, with
/// as many queries as keys), the attention node gets no mask and `is_causal=True`, and the mask's
/// nodes are dropped. Exact: a masked score is -inf (or the dtype's lowest value, whose exponent
/// is 0 too), and no row is masked everywhere. A mask over shape symbols is proved causal at
/// every size instead (Note [Causal masks over shape symbols] in causal_attention.cpp): its
/// aranges, offsets, unsqueezes, slices, expands, comparison, not, and with ones, where(m, 0,
/// -inf), zeros filled with -inf where blocked, and a pad sliced back read as functions of the
/// element's index. A static mask the
/// prover reads is not evaluated either: on a GPU that runs no kernel at compile time (a warm
/// start's pass took 0.05-0.12 s on an H100 loading ATen's kernels for the mask's ops).
#pragma once

#include "tracer/trace_session.h"

namespace ember::runtime {

/// Rewrites `traced` in place. Matches the SDPA kernels with a mask argument
/// (`_scaled_dot_product_efficient_attention` and `_scaled_dot_product_cudnn_attention`'s
/// `attn_bias`, `_scaled_dot_product_flash_attention_for_cpu`'s `attn_mask`) whose `is_causal`
/// is false, dropout 0, and mask computed by deterministic nodes from no graph input. Proves each
/// such mask causal (Note [Causal masks over shape symbols]), or evaluates a static one the
/// prover cannot read (running its nodes on their device), and, when
/// it is causal (a bool mask true exactly at key <= query; a float mask 0 there and -inf or the
/// lowest finite value elsewhere; equal over its leading dimensions; queries = keys, compared as
/// expressions), drops the mask and sets `is_causal`.
/// Nodes no longer read by anything (deterministic, read only by the dropped masks) are removed.
/// The rewritten graph passes the verifier. Returns the number of attention nodes rewritten.
int causal_attention(tracer::TracedGraph& traced);

}  // namespace ember::runtime
