#include "rewrite/rewrites.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "rewrite/attention_rewrite.h"
#include "rewrite/batch_norm_inference.h"
#include "rewrite/batch_norm_rewrite.h"
#include "rewrite/batch_norm_update.h"
#include "rewrite/conv_as_product.h"
#include "rewrite/conv_bias.h"
#include "rewrite/conv_layout.h"
#include "rewrite/decompose_backward.h"
#include "rewrite/foreach_ops.h"
#include "rewrite/log_softmax_rewrite.h"
#include "rewrite/matmul_padding.h"
#include "rewrite/pool_offsets.h"
#include "rewrite/sdp_choice.h"
#include "rewrite/split_reduction.h"
#include "rewrite/vector_norm.h"
#include "support/error.h"
#include "tracer/convert.h"
#include "tracer/trace_session.h"
#include "tracer/tracer_tensor.h"

namespace ember::rewrite {

using tracer::op_kind;
using tracer::Rewrite;
using tracer::RewriteCall;

namespace {

// `self[..., mask] = value` (aten::index_put with one boolean mask, after leading full slices,
// accumulate false) whose value broadcasts to the indexed shape whatever the number of true
// elements, as `where(mask, value, self)`: the same result without a data-dependent nonzero (HF
// models build attention masks so, and put one embedding at a special token's positions).
// Returns nothing when the call has another form (a value with one row per true element is
// data-dependent).
//
// With p leading slices and a mask over self's dims [p, p + m), the indexed shape is
// self[:p] + (N,) + self[p + m:]. The value right-aligns to it: its dims under self[p + m:] must
// broadcast there, a dim under N must be 1, and those under self[:p] must broadcast there. The
// where form views the mask as (1,)*p + mask + (1,)*rest and the value with N's dim replaced by
// m ones.
std::optional<at::Tensor> index_put_as_where(const c10::OperatorHandle& op,
                                             c10::ArrayRef<c10::IValue> args) {
  if (op_kind(op.schema()) != graph::OpKind::index_put || args.size() != 4) return std::nullopt;
  if (!args[0].isTensor() || !args[1].isList() || !args[2].isTensor() || !args[3].isBool() ||
      args[3].toBool()) {
    return std::nullopt;
  }
  const at::Tensor& self = args[0].toTensor();
  at::Tensor values = args[2].toTensor();
  c10::ArrayRef<c10::IValue> indices = args[1].toListRef();
  if (indices.empty()) return std::nullopt;
  const int64_t p = static_cast<int64_t>(indices.size()) - 1;
  for (int64_t i = 0; i < p; ++i) {
    const c10::IValue& e = indices[static_cast<size_t>(i)];
    if (!(e.isNone() || (e.isTensor() && !e.toTensor().defined()))) return std::nullopt;
  }
  if (!indices.back().isTensor()) return std::nullopt;
  at::Tensor mask = indices.back().toTensor();
  if (!mask.defined() || mask.scalar_type() != c10::kBool) return std::nullopt;
  const int64_t m = mask.dim();
  const int64_t rank = self.dim();
  if (m == 0 || p + m > rank) return std::nullopt;
  for (int64_t d = 0; d < m; ++d) {
    if (!mask.sym_size(d).sym_eq(self.sym_size(p + d)).guard_bool(__FILE__, __LINE__)) {
      return std::nullopt;
    }
  }
  const int64_t rest = rank - p - m;
  // The indexed shape's dims, right-aligned against the value's: self[:p], N, self[p + m:].
  const int64_t indexed_rank = p + 1 + rest;
  const int64_t vrank = values.dim();
  if (vrank > indexed_rank) return std::nullopt;
  std::vector<c10::SymInt> vshape;  // the value's view in self's rank
  for (int64_t j = 0; j < indexed_rank; ++j) {
    const int64_t vd = j - (indexed_rank - vrank);  // the value's dim under indexed dim j
    const bool has = vd >= 0;
    if (j == p) {  // N
      if (has && values.sym_size(vd) != 1) return std::nullopt;
      for (int64_t k = 0; k < m; ++k) vshape.emplace_back(1);
      continue;
    }
    const int64_t sd = j < p ? j : j - 1 + m;  // self's dim under indexed dim j
    if (!has) {
      vshape.emplace_back(1);
      continue;
    }
    const c10::SymInt& size = values.sym_size(vd);
    if (size != 1 && !size.sym_eq(self.sym_size(sd)).guard_bool(__FILE__, __LINE__)) {
      return std::nullopt;
    }
    vshape.push_back(size);
  }
  // (A value within self's trailing dims and a mask over all of self's leading ones broadcast
  // as they are.)
  if (vrank > rest) values = values.reshape_symint(vshape);
  if (p > 0 || rest > 0) {
    std::vector<c10::SymInt> mshape(static_cast<size_t>(p), c10::SymInt(1));
    for (int64_t d = 0; d < m; ++d) mshape.push_back(mask.sym_size(d));
    mshape.resize(static_cast<size_t>(rank), c10::SymInt(1));
    mask = mask.view_symint(mshape);
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
  note_pool_offsets(c.session, c.stack->back().toTensor(), *w);
  return true;
}

bool pool_backward_from_offsets(RewriteCall& c) {
  // The indices a pool above recorded offsets of: the backward from the offsets (Note [A max
  // pool's backward from its offsets]), or ATen's with the indices rebuilt from them.
  c10::ArrayRef<c10::IValue> a = c.args();
  if (a.size() != 8 || !a[7].isTensor()) return false;
  const std::pair<at::Tensor, PoolWindow>* found = pool_offsets_of(c.session, a[7].toTensor());
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

/// The convolution on channels-last operands (conv_layout.h), grouped ones too when `grouped`.
bool record_channels_last(RewriteCall& c, bool grouped) {
  bool from_contiguous = false;
  std::optional<at::Tensor> r =
      channels_last_convolution(c.op, c.args(), &from_contiguous, grouped);
  if (!r.has_value()) return false;
  if (from_contiguous) c.session.note_channels_last_from_contiguous();
  c.push_results({std::move(*r)});
  return true;
}

bool channels_last(RewriteCall& c) {
  return record_channels_last(c, /*grouped=*/false);
}

bool channels_last_cpu(RewriteCall& c) {
  if (!cpu_convolutions_use_onednn()) return false;
  // Inference only (grad mode off: no_grad or inference_mode), where it was measured; a joint
  // trace records under grad mode, and there oneDNN's NHWC backward sums the gradients in
  // another order than eager's NCHW one (weight gradients 3e-5 apart in a small ResNet). The
  // tensors here are below functionalization, whose wrappers hold requires_grad.
  if (at::GradMode::is_enabled()) return false;
  return record_channels_last(c, /*grouped=*/true);
}

bool grouped_by_timing(RewriteCall& c) {
  // Inference only: the backward's layouts were not timed (Note [Grouped convolutions by timing]).
  if (at::GradMode::is_enabled()) return false;
  bool from_contiguous = false;
  std::optional<at::Tensor> r = grouped_convolution_by_timing(c.op, c.args(), &from_contiguous);
  if (!r.has_value()) return false;
  if (from_contiguous) c.session.note_channels_last_from_contiguous();
  c.push_results({std::move(*r)});
  return true;
}

bool conv_as_product(RewriteCall& c) {
  const CompileOptions& o = c.session.options();
  // Every one the rewrite takes (0), or the launch-bound ones, whose products get templates
  // (not under a CUDA graph's replay, which hides the host's time).
  int64_t bound = 0;
  if (!o.trace.pointwise_convolutions_as_products) {
    bound = o.runtime.launch_bound_products;
    if (bound <= 0 || o.runtime.cuda_graphs || !o.triton.enabled || !o.sched.codegen) {
      return false;
    }
  }
  std::optional<at::Tensor> r = pointwise_convolution_as_product(c.op, c.args(), bound);
  if (!r.has_value()) return false;
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

tracer::RewriteTable rewrite_table() {
  using graph::OpKind;
  using tracer::Where;
  using tracer::Widening;
  static const std::vector<Rewrite> table = {
      {"cudnn_statistics",
       {OpKind::cudnn_batch_norm},
       "",
       Where::Cuda,
       Widening::None,
       "training, trace.cudnn_batch_norm=stats (the default)",
       "cuDNN's statistics kept, the output ember's normalization from them",
       cudnn_statistics},
      {"pool_window_offsets",
       {OpKind::max_pool2d_with_indices},
       "",
       Where::Cuda,
       Widening::SplitsEverywhere,
       "grad mode, windows of at most 127 positions",
       "the indices also saved as int8 window offsets",
       pool_window_offsets},
      {"pool_backward_from_offsets",
       {OpKind::max_pool2d_with_indices_backward},
       "",
       Where::Any,
       Widening::None,
       "where a pool saved offsets",
       "the backward as gathers from the offsets",
       pool_backward_from_offsets},
      {"foreach_per_tensor",
       {},
       "aten::_foreach_",
       Where::Any,
       Widening::None,
       "",
       "one op per tensor",
       on_stack<record_foreach_as_per_tensor_ops>},
      {"batch_norm_update",
       {OpKind::native_batch_norm},
       "",
       Where::Any,
       Widening::None,
       "training, running statistics that are graph inputs",
       "_native_batch_norm_legit_functional, its running statistics as input mutations",
       record_batch_norm_update},
      {"sdp_choice",
       {OpKind::_fused_sdp_choice},
       "",
       Where::Cuda,
       Widening::None,
       "",
       "the CUDA kernel's choice",
       choose_sdp_backend},
      {"backward_decomposition",
       {OpKind::gelu_backward, OpKind::hardsigmoid_backward, OpKind::hardswish_backward,
        OpKind::hardtanh_backward, OpKind::leaky_relu_backward, OpKind::nll_loss_backward,
        OpKind::select_backward, OpKind::sigmoid_backward, OpKind::silu_backward,
        OpKind::slice_backward, OpKind::softplus_backward, OpKind::tanh_backward,
        OpKind::threshold_backward},
       "",
       Where::Any,
       Widening::None,
       "floating dtypes",
       "the pointwise ops that compute the gradient",
       on_stack<record_pointwise_backward>},
      {"backward_reduction_decomposition",
       {OpKind::_log_softmax_backward_data, OpKind::_softmax_backward_data,
        OpKind::convolution_backward, OpKind::native_layer_norm_backward},
       "",
       Where::Cuda,
       Widening::DecomposeBackwardEverywhere,
       "floating dtypes; a convolution's with a bias",
       "the pointwise ops and sums that compute the gradient (a convolution's bias gradient)",
       on_stack<record_reduction_backward>},
      {"batch_norm_backward_decomposition",
       {OpKind::native_batch_norm_backward},
       "",
       Where::Nowhere,
       Widening::DecomposeBackwardEverywhere,
       "floating dtypes (Note [Batch-norm backward])",
       "the pointwise ops and sums (side by side) that compute the gradient",
       on_stack<record_batch_norm_backward>},
      {"split_reduction",
       {OpKind::native_group_norm, OpKind::_native_batch_norm_legit_functional, OpKind::sum,
        OpKind::mean, OpKind::amax, OpKind::amin},
       "",
       Where::Cuda,
       Widening::SplitsEverywhere,
       "few results of many elements",
       "few long reductions in two stages",
       on_stack<record_split_reduction>},
      {"batch_norm_inference",
       {OpKind::native_batch_norm, OpKind::_native_batch_norm_legit,
        OpKind::_native_batch_norm_legit_no_training, OpKind::cudnn_batch_norm},
       "",
       Where::Cuda,
       Widening::None,
       "eval, nothing requires grad",
       "a per-channel affine map",
       on_stack<record_batch_norm_inference>},
      {"index_put_as_where",
       {OpKind::index_put},
       "",
       Where::Any,
       Widening::None,
       "one boolean mask, one value",
       "self[mask] = value as where(mask, value, self)",
       one_result<index_put_as_where>},
      {"pad_unaligned_matmul",
       {OpKind::mm, OpKind::bmm, OpKind::addmm},
       "",
       Where::Cuda,
       Widening::None,
       "bf16, f16 or f32, unaligned, at least 2^26 multiply-adds",
       "the product of zero-padded operands, sliced",
       one_result<pad_unaligned_matmul>},
      {"convolution_bias_apart",
       {OpKind::convolution},
       "",
       Where::Cuda,
       Widening::None,
       "a bias, f32/bf16/f16, nothing requires grad",
       "the convolution without its bias, then an add",
       one_result<convolution_bias_apart>},
      {"log_softmax_as_logsumexp",
       {OpKind::_log_softmax},
       "",
       Where::Cuda,
       Widening::SplitsEverywhere,
       "a last dim of at least 4096",
       "x - logsumexp(x)",
       one_result<log_softmax_as_logsumexp>},
      {"grouped_convolution_layout",
       {OpKind::convolution},
       "",
       Where::Cuda,
       Widening::None,
       "2D, f32/bf16/f16, grouped (depthwise too), grad mode off, a CUDA device present; before "
       "channels_last_convolution, which would take a depthwise one",
       "the convolution on the operand layout (NCHW or NHWC) cuDNN runs faster, timed once per "
       "shape",
       grouped_by_timing},
      {"channels_last_convolution",
       {OpKind::convolution},
       "",
       Where::Cuda,
       Widening::None,
       "2D, f32/bf16/f16, not grouped (depthwise: one channel per group, when not timed), not "
       "channels-last yet",
       "the convolution on channels-last operands",
       channels_last},
      {"pointwise_convolution_as_product",  // with trace.pointwise_convolutions_as_products
       {OpKind::convolution},
       "",
       Where::Cuda,
       Widening::None,
       "EMBER_CONV1X1_AS_MM=1; 1x1, stride 1, no padding, one group, bf16/f16, a channels-last "
       "input, grad mode off; "
       "after channels_last_convolution, which makes the input channels-last",
       "the product of the input's rows and the weight, viewed back",
       conv_as_product},
      {"channels_last_convolution_cpu",
       {OpKind::convolution},
       "",
       Where::Cpu,
       Widening::None,
       "2D, f32/bf16/f16, not channels-last yet, grad mode off, ATen's CPU convolutions on "
       "oneDNN",
       "the convolution on channels-last operands (oneDNN's NHWC kernels)",
       channels_last_cpu},
      {"vector_norm_as_reduction",
       {OpKind::linalg_vector_norm},
       "",
       Where::Any,
       Widening::None,
       "a floating input, an order > 0 or -inf",
       "the sum, amax or amin it is (Note [Vector norms as reductions])",
       one_result<vector_norm_as_reduction>},
      {"nll_loss_as_gather",
       {OpKind::nll_loss_forward},
       "",
       Where::Cuda,
       Widening::SplitsEverywhere,
       "no class weights, a row of at least 4096",
       "a gather and a sum",
       nll_loss_gather},
  };
  return table;
}

void register_rewrite_kernels() {
  register_attention_rewrite();
  register_batch_norm_rewrite();
}

}  // namespace ember::rewrite
