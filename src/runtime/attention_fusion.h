/// \file
/// Eager attention as one attention node (Inductor's fuse_attention), a graph pass run before
/// scheduling. A graph's
///
///     s = bmm(q, kt)
///     p = _softmax(s [* c] [viewed 4D + mask, viewed back], -1)   [cast, views]
///     o = bmm(p, v)
///
/// with every value between the two products read by the next node only becomes
///
///     o = ember::fused_attention(q, kt, v, mask, c, heads, convert_mask)
///
/// an op of ember's (registered in attention_fusion.cpp) that calls ATen's
/// scaled_dot_product_attention, which picks the fused kernel at run time (efficient or cuDNN
/// attention with a mask, flash without one on CUDA): the scores and probabilities never reach
/// memory. The scheduler sees one extern node: it realizes the mask (an input of an extern node)
/// and never schedules the graph again for the fusion. Decoders such as TrOCR's run their
/// attention as those ops (`bmm`, `+ mask`, `softmax`, `bmm`), each writing and reading a
/// [batch, heads, queries, keys] tensor; Inductor's pattern turns them into cuDNN attention.
///
/// Not exact: the fused kernels keep the scores and probabilities in f32 where eager rounds them to
/// bf16 or f16 between the ops (more accurate, not bit-identical), as Inductor's rewrite. Under
/// autocast, eager adds an f32 mask to the bf16 scores in f32 and casts the softmax back: the mask
/// is then rounded to bf16 for SDPA, as Inductor does too.
#pragma once

#include "tracer/trace_session.h"

namespace ember::runtime {

/// Rewrites `traced` in place. Matches o = bmm(p, v) where p is, through views, expands, clones
/// and casts to the products' dtype, `_softmax(x, -1, half_to_float=False)`; x is, through views,
/// [scores + mask] (alpha 1, the scores [B*H, Sq, Sk] viewed [B, H, Sq, Sk] or kept 3D; the
/// operand that leads back to the first product is the scores, the other the mask), then
/// [scores * c or / c] (c a number, or a 0-dim floating constant of the graph), then
/// scores = bmm(q, kt). q, kt, v and p have one floating dtype; the mask has q's dtype or f32; o
/// is contiguous. Every value between the two products is read by the next node of the pattern
/// only (no output, no mutation, no other reader). Each match's nodes are replaced by one
/// ember::fused_attention node in the second product's place, with o's type; the mask's own
/// nodes stay. The rewritten graph passes the verifier. Returns the number of patterns replaced.
int fuse_attention(tracer::TracedGraph& traced);

}  // namespace ember::runtime
