#pragma once

// Note [Log-softmax as x - logsumexp(x)]
// A language model's loss is log_softmax over its vocabulary, then nll_loss. In training the
// backward needs the log-softmax's result y (g - exp(y) * sum(g)), and `_log_softmax` is a
// reduction, which the min cut cannot recompute: it would save y, f32 over the whole vocabulary
// (GPT-2's head, 4 x 1024 x 50257: 785 MB, twice the bf16 logits it is computed from), and the
// training peak with it. A `_log_softmax` on a CUDA tracer tensor over a long last dim (at least
// 4096) is therefore recorded as
//     x - logsumexp(x, -1, keepdim)          (in f32 when the op upcasts: half_to_float)
// rounded once to the result's dtype: eager's kernel computes x - max - log(sum(exp(x - max)))
// in f32, and logsumexp is that max plus that log. The subtraction is pointwise, so it joins the
// logsumexp's kernel as an epilogue in the forward, and the backward recomputes it from the
// logits and one value per row: the min cut saves the logits (bf16) and the row values.
// EMBER_SPLIT_REDUCTIONS=all records it so on the CPU too (the tests compare it with eager).
//
// The loss then reads one element per row of that result, but `nll_loss_forward` is an ATen call,
// which needs the whole result in memory: the forward would still write it (Llama's head,
// 8192 x 32000 f32: 1 GB written and held until the loss is done). Where the log-softmax is
// recorded so (the same tensors: CUDA, a long last dim), `nll_loss_forward` without class weights
// and with a mean or sum is recorded as
//     picked = where(target != ignore_index, -self.gather(1, target'), 0)   (target' = 0 where
//     total_weight = count of target != ignore_index                         ignored)
//     output = sum(picked) / total_weight   (a mean; sum(picked) for a sum)
// in f32 and rounded once, as ATen's kernel sums. The gather reads the log-softmax through its
// expression (x - logsumexp at the target's column), so nothing writes it. Autograd still records
// the call as nll_loss_forward (this runs below it): its backward is nll_loss_backward's
// decomposition (decompose_backward.cpp), which reads only the target.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <utility>

namespace ember::rewrite {

/// `aten::_log_softmax` called with `args` (tracer tensors) recorded as above, or nullopt when
/// the call is recorded as it is (not CUDA, a short or not-last dim, not a floating dtype).
std::optional<at::Tensor> log_softmax_as_logsumexp(const c10::OperatorHandle& op,
                                                   c10::ArrayRef<c10::IValue> args);

/// `aten::nll_loss_forward` called with `args` recorded as above: its (output, total_weight), or
/// nullopt when the call is recorded as it is (not CUDA, a short row, class weights, no
/// reduction, not [N, C] with a target of N integers).
std::optional<std::pair<at::Tensor, at::Tensor>> nll_loss_as_gather(
    const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

}  // namespace ember::rewrite
