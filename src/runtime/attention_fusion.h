/// \file
/// Eager attention as one scaled_dot_product_attention call (Inductor's fuse_attention): a plan's
///
///     s = bmm(q, kt)            (an extern step)
///     p = softmax(s [* c] [viewed 4D + mask, viewed back], -1)   (one kernel, nothing else)
///     o = bmm(p, v)             (an extern step)
///
/// with s and p read by nothing else runs as `o = sdpa(q, kt^T, v, mask, scale=c)`, viewed as the
/// graph traced `o`. ATen picks the fused kernel at run time (efficient or cuDNN attention with a
/// mask, flash without one on CUDA): the scores and probabilities never reach memory. Decoders
/// such as TrOCR's run their attention as those steps (`bmm`, `+ mask`, `softmax`, `bmm`), each
/// writing and reading a [batch, heads, queries, keys] tensor; Inductor's pattern turns them into
/// cuDNN attention.
///
/// Not exact: the fused kernels keep the scores and probabilities in f32 where eager rounds them to
/// bf16 or f16 between the ops (more accurate, not bit-identical), as Inductor's rewrite. Under
/// autocast, eager adds an f32 mask to the bf16 scores in f32 and casts the softmax back: the mask
/// is then rounded to bf16 for SDPA, as Inductor does too.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace ember::sched {
struct Plan;
}

namespace ember::runtime {

struct FusedAttention {
  graph::ValueId q = -1, kt = -1, v = -1, mask = -1, out = -1;  ///< mask -1: none
  double scale = 1.0;
  /// The mask is f32 and q bf16 or f16 (autocast): converted to q's dtype per call, as
  /// Inductor's rewrite does (mask values round to q's dtype: not exact for arbitrary biases).
  bool convert_mask = false;
  /// [B, H] when the mask is added to the scores viewed [B, H, Sq, Sk]: q, k and v are viewed
  /// so too; empty when the scores keep their 3 dims.
  std::vector<int64_t> heads;
  std::vector<int64_t> out_sizes, out_strides;  ///< o's traced layout
  /// The plan's steps it replaces: the two products and the softmax kernel.
  int first_product_step = -1, softmax_step = -1, second_product_step = -1;
  int view_step = -1;  ///< a view step between the softmax and the second product, or -1

  /// o from the tensors of `env`, in o's traced layout.
  at::Tensor run(const std::vector<at::Tensor>& env) const;
};

/// The attention patterns of `plan` (see the file comment). `constant_value`: the value of a
/// 0-dim constant graph input (the scale a Python float becomes), nullopt for other values.
/// `realize`: receives the masks of patterns that match but for a mask computed inside the
/// softmax's kernel (LayoutLM's `(1 - mask) * min`): scheduled again with them realized
/// (sched::ScheduleOptions::realize), those patterns match. `separate`: likewise, values the
/// softmax's kernel also computes for other readers (LayoutLM's copy of v), to be scheduled as
/// no reduction's epilogue (ScheduleOptions::no_epilogue).
std::vector<FusedAttention> find_fused_attention(
    const graph::Graph& g, const sched::Plan& plan,
    const std::function<std::optional<double>(graph::ValueId)>& constant_value,
    std::vector<graph::ValueId>* realize = nullptr,
    std::vector<graph::ValueId>* separate = nullptr);

}  // namespace ember::runtime
