#include "tracer/rewrites.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "support/error.h"
#include "tracer/batch_norm_inference.h"
#include "tracer/batch_norm_rewrite.h"
#include "tracer/conv_bias.h"
#include "tracer/conv_layout.h"
#include "tracer/convert.h"
#include "tracer/decompose_backward.h"
#include "tracer/foreach_ops.h"
#include "tracer/log_softmax_rewrite.h"
#include "tracer/matmul_padding.h"
#include "tracer/pool_offsets.h"
#include "tracer/split_reduction.h"
#include "tracer/trace_session.h"
#include "tracer/tracer_tensor.h"

namespace ember::tracer {

void RewriteCall::push_results(std::vector<at::Tensor> results) {
  torch::jit::drop(*stack, num_args);
  for (at::Tensor& r : results) stack->emplace_back(std::move(r));
}

void RewriteCall::record_as_is() {
  session.record_skipping(row, op, stack);
}

bool Rewrite::matches(graph::OpKind kind, std::string_view op_name) const {
  if (!prefix.empty() && op_name.substr(0, prefix.size()) == prefix) return true;
  return kind != graph::OpKind::Unknown && std::find(ops.begin(), ops.end(), kind) != ops.end();
}

bool rewrite_disabled(std::string_view disabled, std::string_view name) {
  size_t start = 0;
  while (start <= disabled.size()) {
    size_t comma = disabled.find(',', start);
    if (comma == std::string_view::npos) comma = disabled.size();
    if (disabled.substr(start, comma - start) == name) return true;
    start = comma + 1;
  }
  return false;
}

namespace {

// `self[mask] = value` (aten::index_put with one boolean mask over leading dims of self, a
// one-element value and accumulate false) as `where(mask, value, self)`: the same result without
// a data-dependent nonzero (HF models build attention masks so). Returns nothing when the call has
// another form.
std::optional<at::Tensor> index_put_as_where(const c10::OperatorHandle& op,
                                             c10::ArrayRef<c10::IValue> args) {
  if (op_kind(op.schema()) != graph::OpKind::index_put || args.size() != 4) return std::nullopt;
  if (!args[0].isTensor() || !args[1].isList() || !args[2].isTensor() || !args[3].isBool() ||
      args[3].toBool()) {
    return std::nullopt;
  }
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  c10::ArrayRef<c10::IValue> indices = args[1].toListRef();
  if (indices.size() != 1 || !indices[0].isTensor()) return std::nullopt;
  at::Tensor mask = indices[0].toTensor();
  if (!mask.defined() || mask.scalar_type() != c10::kBool || mask.dim() > self.dim() ||
      values.numel() != 1 || values.dim() > self.dim()) {
    return std::nullopt;
  }
  for (int64_t d = 0; d < mask.dim(); ++d) {
    if (mask.size(d) != self.size(d)) return std::nullopt;
  }
  if (mask.dim() < self.dim()) {
    std::vector<int64_t> shape(mask.sizes().begin(), mask.sizes().end());
    shape.resize(static_cast<size_t>(self.dim()), 1);
    mask = mask.view(shape);
  }
  return at::where(mask, values.to(self.scalar_type()), self);
}

// A rewrite whose function returns the op's one result, or nothing.
template <std::optional<at::Tensor> (*F)(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue>)>
bool one_result(RewriteCall& c) {
  std::optional<at::Tensor> r = F(c.op, c.args());
  if (!r.has_value()) return false;
  c.push_results({std::move(*r)});
  return true;
}

// A rewrite that works on the stack itself.
template <bool (*F)(const c10::OperatorHandle&, torch::jit::Stack*)>
bool on_stack(RewriteCall& c) {
  return F(c.op, c.stack);
}

bool cudnn_statistics(RewriteCall& c) {
  // Note [cuDNN statistics, ember's normalization]: the op as it is, then ember's output.
  std::optional<CudnnNormalization> n = cudnn_normalization(c.op, *c.stack);
  if (!n.has_value()) return false;
  c.record_as_is();
  normalize_from_statistics(*n, c.stack);
  return true;
}

bool pool_window_offsets(RewriteCall& c) {
  // Note [Max-pool indices saved as window offsets]: the pool as it is, then the offsets.
  std::optional<PoolWindow> w = offsets_window(c.op, c.args());
  if (!w.has_value()) return false;
  c.record_as_is();
  c.session.note_pool_offsets(c.stack->back().toTensor(), *w);
  return true;
}

bool pool_backward_from_offsets(RewriteCall& c) {
  // The indices a pool above recorded offsets of: the backward from the offsets (Note [A max
  // pool's backward from its offsets]), or ATen's with the indices rebuilt from them.
  c10::ArrayRef<c10::IValue> a = c.args();
  if (a.size() != 8 || !a[7].isTensor()) return false;
  const std::pair<at::Tensor, PoolWindow>* found = c.session.pool_offsets_of(a[7].toTensor());
  if (found == nullptr) return false;
  const auto& [offsets, window] = *found;
  std::optional<at::Tensor> dx;
  if (a[0].isTensor() && a[1].isTensor()) {
    dx = record_pool_backward_from_offsets(a[0].toTensor(), a[1].toTensor(), offsets, window);
  }
  if (dx.has_value()) {
    c.push_results({std::move(*dx)});
    return true;
  }
  (*c.stack)[c.base + 7] = record_indices_from_offsets(offsets, window);
  c.record_as_is();
  return true;
}

bool batch_norm_update(RewriteCall& c) {
  return c.session.record_batch_norm_update(c.op, c.stack);
}

bool sdp_choice(RewriteCall& c) {
  return c.session.choose_sdp_backend(c.op, c.stack);
}

bool channels_last(RewriteCall& c) {
  bool from_contiguous = false;
  std::optional<at::Tensor> r = channels_last_convolution(c.op, c.args(), &from_contiguous);
  if (!r.has_value()) return false;
  if (from_contiguous) c.session.note_channels_last_from_contiguous();
  c.push_results({std::move(*r)});
  return true;
}

bool nll_loss_gather(RewriteCall& c) {
  std::optional<std::pair<at::Tensor, at::Tensor>> loss = nll_loss_as_gather(c.op, c.args());
  if (!loss.has_value()) return false;
  c.push_results({std::move(loss->first), std::move(loss->second)});
  return true;
}

}  // namespace

const std::vector<Rewrite>& rewrite_table() {
  static const std::vector<Rewrite> table = {
      {"cudnn_statistics",
       {graph::OpKind::cudnn_batch_norm},
       "",
       "CUDA, training, f32/f16",
       "cuDNN's statistics kept, the output ember's normalization from them",
       cudnn_statistics},
      {"pool_window_offsets",
       {graph::OpKind::max_pool2d_with_indices},
       "",
       "CUDA, or trace.splits_everywhere",
       "the indices also saved as int8 window offsets",
       pool_window_offsets},
      {"pool_backward_from_offsets",
       {graph::OpKind::max_pool2d_with_indices_backward},
       "",
       "where a pool saved offsets",
       "the backward as gathers from the offsets",
       pool_backward_from_offsets},
      {"foreach_per_tensor",
       {},
       "aten::_foreach_",
       "any device",
       "one op per tensor",
       on_stack<record_foreach_as_per_tensor_ops>},
      {"batch_norm_update",
       {graph::OpKind::native_batch_norm},
       "",
       "any device, training",
       "_native_batch_norm_legit_functional, its running statistics as input mutations",
       batch_norm_update},
      {"sdp_choice",
       {graph::OpKind::_fused_sdp_choice},
       "",
       "CUDA",
       "the CUDA kernel's choice",
       sdp_choice},
      {"backward_decomposition",
       {graph::OpKind::_log_softmax_backward_data, graph::OpKind::_softmax_backward_data,
        graph::OpKind::convolution_backward, graph::OpKind::gelu_backward,
        graph::OpKind::hardsigmoid_backward, graph::OpKind::hardswish_backward,
        graph::OpKind::hardtanh_backward, graph::OpKind::leaky_relu_backward,
        graph::OpKind::native_batch_norm_backward, graph::OpKind::native_layer_norm_backward,
        graph::OpKind::nll_loss_backward, graph::OpKind::select_backward,
        graph::OpKind::sigmoid_backward, graph::OpKind::silu_backward,
        graph::OpKind::slice_backward, graph::OpKind::softplus_backward,
        graph::OpKind::tanh_backward, graph::OpKind::threshold_backward},
       "",
       "pointwise ones anywhere; reductions on CUDA, or trace.decompose_backward_everywhere",
       "the pointwise ops and sums that compute the gradient",
       on_stack<record_backward_decomposition>},
      {"split_reduction",
       {graph::OpKind::native_group_norm, graph::OpKind::_native_batch_norm_legit_functional,
        graph::OpKind::sum, graph::OpKind::mean, graph::OpKind::amax, graph::OpKind::amin},
       "",
       "CUDA, or trace.splits_everywhere",
       "few long reductions in two stages",
       on_stack<record_split_reduction>},
      {"batch_norm_inference",
       {graph::OpKind::native_batch_norm, graph::OpKind::_native_batch_norm_legit,
        graph::OpKind::_native_batch_norm_legit_no_training, graph::OpKind::cudnn_batch_norm},
       "",
       "any device, eval",
       "a per-channel affine map",
       on_stack<record_batch_norm_inference>},
      {"index_put_as_where",
       {graph::OpKind::index_put},
       "",
       "any device",
       "self[mask] = value as where(mask, value, self)",
       one_result<index_put_as_where>},
      {"pad_unaligned_matmul",
       {graph::OpKind::mm, graph::OpKind::bmm, graph::OpKind::addmm},
       "",
       "CUDA, 16-bit",
       "the product of zero-padded operands, sliced",
       one_result<pad_unaligned_matmul>},
      {"convolution_bias_apart",
       {graph::OpKind::convolution},
       "",
       "CUDA",
       "the convolution without its bias, then an add",
       one_result<convolution_bias_apart>},
      {"log_softmax_as_logsumexp",
       {graph::OpKind::_log_softmax},
       "",
       "CUDA, or trace.splits_everywhere",
       "x - logsumexp(x)",
       one_result<log_softmax_as_logsumexp>},
      {"channels_last_convolution",
       {graph::OpKind::convolution},
       "",
       "CUDA",
       "the convolution on channels-last operands",
       channels_last},
      {"nll_loss_as_gather",
       {graph::OpKind::nll_loss_forward},
       "",
       "CUDA, or trace.splits_everywhere",
       "a gather and a sum",
       nll_loss_gather},
  };
  return table;
}

}  // namespace ember::tracer
