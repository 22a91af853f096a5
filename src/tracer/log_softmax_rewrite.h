#pragma once

// Note [Log-softmax as x - logsumexp(x)]
// A language model's loss is log_softmax over its vocabulary, then nll_loss. In training the
// backward needs the log-softmax's result y (g - exp(y) * sum(g)), and `_log_softmax` is a
// reduction, which the min cut cannot recompute: it saved y, f32 over the whole vocabulary (GPT-2's
// head, 4 x 1024 x 50257: 785 MB, twice the bf16 logits it is computed from; ember's peak in bf16
// training was 3959 MB against Inductor's 3640). A `_log_softmax` on a CUDA tracer tensor over
// a long last dim (at least 4096) is therefore recorded as
//     x - logsumexp(x, -1, keepdim)          (in f32 when the op upcasts: half_to_float)
// rounded once to the result's dtype: eager's kernel computes x - max - log(sum(exp(x - max)))
// in f32, and logsumexp is that max plus that log. The subtraction is pointwise, so it joins the
// logsumexp's kernel as an epilogue in the forward, and the backward recomputes it from the
// logits and one value per row: the min cut saves the logits (bf16) and the row values.
// EMBER_SPLIT_REDUCTIONS=all records it so on the CPU too (the tests compare it with eager).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace ember::tracer {

/// `aten::_log_softmax` called with `args` (tracer tensors) recorded as above, or nullopt when
/// the call is recorded as it is (not CUDA, a short or not-last dim, not a floating dtype).
std::optional<at::Tensor> log_softmax_as_logsumexp(const c10::OperatorHandle& op,
                                                   c10::ArrayRef<c10::IValue> args);

}  // namespace ember::tracer
