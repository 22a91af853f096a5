#include "rewrite/decompose_backward.h"
#include "tracer/trace_session.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/ops.h"
#include "rewrite/split_reduction.h"
#include "tracer/tracer_tensor.h"

namespace ember::rewrite {

using tracer::as_tracer;

namespace {

using Stack = torch::jit::Stack;

bool is_half(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16;
}

// The dtypes eager's backward kernels compute (float8 types have none of these ops).
bool is_float(const at::Tensor& t) {
  if (!t.defined()) return false;
  const at::ScalarType s = t.scalar_type();
  return s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16;
}

// The type an op computes in: f32 for halves, as eager's opmath.
at::Tensor opmath(const at::Tensor& t) {
  return is_half(t.scalar_type()) ? t.to(at::kFloat) : t;
}

at::Tensor zero_like_scalar(const at::Tensor& t) {
  return at::scalar_tensor(0, t.options().dtype(t.scalar_type()));
}

std::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().defined()) return v.toTensor();
  return std::nullopt;
}

// The pointwise backward ops: grad_output and one tensor of the same shape, the result in
// grad_output's dtype. Each returns its result, or an undefined tensor to leave the op alone.
using Pointwise = std::function<at::Tensor(const at::Tensor& g, const at::Tensor& x,
                                           c10::ArrayRef<c10::IValue> rest)>;

const std::unordered_map<graph::OpKind, Pointwise>& pointwise_rules() {
  static const auto* rules = new std::unordered_map<graph::OpKind, Pointwise>{
      {graph::OpKind::threshold_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue> rest) {
         return at::where(x.le(rest[0].toScalar()), zero_like_scalar(g), g);
       }},
      {graph::OpKind::hardtanh_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue> rest) {
         at::Tensor out = x.le(rest[0].toScalar()).logical_or(x.ge(rest[1].toScalar()));
         return at::where(out, zero_like_scalar(g), g);
       }},
      {graph::OpKind::leaky_relu_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue> rest) {
         at::Tensor gf = opmath(g);
         return at::where(x.gt(0), gf, gf.mul(rest[0].toScalar())).to(g.scalar_type());
       }},
      {graph::OpKind::gelu_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue> rest) {
         const at::Tensor gf = opmath(g), xf = opmath(x);
         const std::string approximate = rest[0].toStringRef();
         at::Tensor d;
         if (approximate == "none") {
           const double alpha = M_SQRT1_2;                    // 1 / sqrt(2)
           const double beta = M_2_SQRTPI * M_SQRT1_2 * 0.5;  // 1 / sqrt(2 pi)
           at::Tensor cdf = xf.mul(alpha).erf().add(1).mul(0.5);
           at::Tensor pdf = xf.mul(xf).mul(-0.5).exp().mul(beta);
           d = cdf.add(xf.mul(pdf));
         } else if (approximate == "tanh") {
           const double beta = M_SQRT2 * M_2_SQRTPI * 0.5;  // sqrt(2 / pi)
           const double kappa = 0.044715;
           at::Tensor x_sq = xf.mul(xf);
           at::Tensor inner = xf.add(x_sq.mul(xf).mul(kappa)).mul(beta);
           at::Tensor t = inner.tanh();
           at::Tensor left_derivative = t.add(1).mul(0.5);
           at::Tensor right_derivative =
               t.mul(t).neg().add(1).mul(x_sq.mul(3 * kappa).add(1).mul(beta));
           d = left_derivative.add(xf.mul(0.5).mul(right_derivative));
         } else {
           return at::Tensor();
         }
         return gf.mul(d).to(g.scalar_type());
       }},
      {graph::OpKind::silu_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue>) {
         const at::Tensor gf = opmath(g), xf = opmath(x);
         at::Tensor s = xf.sigmoid();
         return gf.mul(s).mul(xf.mul(s.neg().add(1)).add(1)).to(g.scalar_type());
       }},
      {graph::OpKind::sigmoid_backward,
       [](const at::Tensor& g, const at::Tensor& y, c10::ArrayRef<c10::IValue>) {
         const at::Tensor gf = opmath(g), yf = opmath(y);
         return gf.mul(yf.neg().add(1)).mul(yf).to(g.scalar_type());
       }},
      {graph::OpKind::tanh_backward,
       [](const at::Tensor& g, const at::Tensor& y, c10::ArrayRef<c10::IValue>) {
         const at::Tensor gf = opmath(g), yf = opmath(y);
         return gf.mul(yf.mul(yf).neg().add(1)).to(g.scalar_type());
       }},
      {graph::OpKind::hardsigmoid_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue>) {
         const at::Tensor gf = opmath(g);
         at::Tensor inside = x.gt(-3.0).logical_and(x.lt(3.0));
         return at::where(inside, gf.div(6.0), zero_like_scalar(gf)).to(g.scalar_type());
       }},
      {graph::OpKind::hardswish_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue>) {
         const at::Tensor gf = opmath(g), xf = opmath(x);
         at::Tensor mid = at::where(xf.lt(3.0), gf.mul(xf.div(3.0).add(0.5)), gf);
         return at::where(xf.le(-3.0), zero_like_scalar(gf), mid).to(g.scalar_type());
       }},
      {graph::OpKind::softplus_backward,
       [](const at::Tensor& g, const at::Tensor& x, c10::ArrayRef<c10::IValue> rest) {
         const at::Tensor gf = opmath(g), xf = opmath(x);
         at::Tensor xb = xf.mul(rest[0].toScalar());
         at::Tensor z = xb.exp();
         return at::where(xb.gt(rest[1].toScalar()), gf, gf.mul(z).div(z.add(1)))
             .to(g.scalar_type());
       }},
  };
  return *rules;
}

// _softmax_backward_data(grad_output, output, dim, input_dtype) and the log-softmax one.
at::Tensor softmax_backward(const at::Tensor& g, const at::Tensor& y, int64_t dim,
                            at::ScalarType input_dtype, bool log) {
  const at::Tensor gf = opmath(g), yf = opmath(y);
  at::Tensor out;
  if (log) {
    out = gf.sub(yf.exp().mul(gf.sum(dim, true)));
  } else {
    out = yf.mul(gf.sub(gf.mul(yf).sum(dim, true)));
  }
  return out.to(input_dtype);
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
//                            output_mask) -> (grad_input, grad_weight, grad_bias)
bool layer_norm_backward(Stack* stack) {
  constexpr size_t kArgs = 8;
  const size_t base = stack->size() - kArgs;
  const c10::IValue* a = stack->data() + base;
  if (!a[0].isTensor() || !a[1].isTensor() || !a[3].isTensor() || !a[4].isTensor()) return false;
  const at::Tensor g = a[0].toTensor(), x = a[1].toTensor();
  const at::Tensor mean = a[3].toTensor(), rstd = a[4].toTensor();
  if (!is_float(g) || !is_float(x)) return false;
  const std::vector<int64_t> normalized = a[2].toIntVector();
  const std::optional<at::Tensor> weight = optional_tensor(a[5]);
  const std::vector<bool> mask = {a[7].toBoolList()[0], a[7].toBoolList()[1], a[7].toBoolList()[2]};
  const int64_t k = static_cast<int64_t>(normalized.size());
  const int64_t axis = x.dim() - k;
  if (k == 0 || axis < 0 || mean.dim() != x.dim() || rstd.dim() != x.dim()) return false;
  int64_t n = 1;
  for (int64_t s : normalized) n *= s;
  std::vector<int64_t> inner, outer;
  for (int64_t d = 0; d < x.dim(); ++d) (d < axis ? outer : inner).push_back(d);

  const at::Tensor gf = opmath(g), xf = opmath(x);
  const at::Tensor x_hat = xf.sub(mean.to(xf.scalar_type())).mul(rstd.to(xf.scalar_type()));
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) {
    at::Tensor gw = weight.has_value() ? gf.mul(opmath(*weight)) : gf;
    at::Tensor sum_gw = gw.sum(inner, true);
    at::Tensor sum_gw_xhat = gw.mul(x_hat).sum(inner, true);
    grad_input = gw.mul(static_cast<double>(n))
                     .sub(sum_gw)
                     .sub(x_hat.mul(sum_gw_xhat))
                     .mul(rstd.to(xf.scalar_type()).div(static_cast<double>(n)))
                     .to(x.scalar_type());
  }
  if (mask[1] && weight.has_value()) {
    grad_weight = outer.empty() ? gf.mul(x_hat) : gf.mul(x_hat).sum(outer, false);
    grad_weight = grad_weight.to(weight->scalar_type());
  }
  const std::optional<at::Tensor> bias = optional_tensor(a[6]);
  if (mask[2] && bias.has_value()) {
    grad_bias = outer.empty() ? gf : gf.sum(outer, false);
    grad_bias = grad_bias.to(bias->scalar_type());
  }
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
  return true;
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
//                            save_invstd?, train, eps, output_mask)
bool batch_norm_backward(Stack* stack) {
  constexpr size_t kArgs = 10;
  const size_t base = stack->size() - kArgs;
  const c10::IValue* a = stack->data() + base;
  if (!a[0].isTensor() || !a[1].isTensor() || !a[7].isBool()) return false;
  const at::Tensor g = a[0].toTensor(), x = a[1].toTensor();
  // Only on request (the table's row applies under trace.decompose_backward_everywhere alone):
  // ATen's kernel reads the activation gradient once for both sums, and the decomposed form
  // makes training slower (Note [Batch-norm backward] in the header).
  if (!is_float(g) || !is_float(x) || x.dim() < 2) return false;
  const bool train = a[7].toBool();
  const double eps = a[8].toDouble();
  const std::optional<at::Tensor> weight = optional_tensor(a[2]);
  std::optional<at::Tensor> mean, invstd;
  if (train) {
    mean = optional_tensor(a[5]);
    invstd = optional_tensor(a[6]);
  } else {
    mean = optional_tensor(a[3]);
    std::optional<at::Tensor> var = optional_tensor(a[4]);
    const at::ScalarType acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    if (var.has_value()) invstd = var->to(acc).add(eps).rsqrt();
  }
  if (!mean.has_value() || !invstd.has_value()) return false;
  const int64_t c = x.size(1);
  if (mean->numel() != c || invstd->numel() != c) return false;
  const std::vector<bool> mask = {a[9].toBoolList()[0], a[9].toBoolList()[1], a[9].toBoolList()[2]};
  std::vector<int64_t> reduced, per_channel(static_cast<size_t>(x.dim()), 1);
  per_channel[1] = c;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != 1) reduced.push_back(d);
  }
  const double r = static_cast<double>(x.numel() / std::max<int64_t>(c, 1));

  const at::ScalarType acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor gf = g.to(acc), xf = x.to(acc);
  const at::Tensor m = mean->to(acc).view(per_channel);
  const at::Tensor is = invstd->to(acc).view(per_channel);
  const at::Tensor x_hat = xf.sub(m).mul(is);
  at::Tensor sum_g, sum_g_xhat;
  if (train || mask[1]) {
    // Both over the same rows, recorded side by side: one kernel reads g once for both.
    std::vector<at::Tensor> sums = record_sums_side_by_side({gf, gf.mul(x_hat)}, reduced, acc);
    sum_g = sums[0];
    sum_g_xhat = sums[1];
  } else if (mask[2]) {
    sum_g = gf.sum(reduced, false);
  }
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) {
    at::Tensor scale = weight.has_value() ? is.mul(weight->to(acc).view(per_channel)) : is;
    at::Tensor centered = gf;
    if (train) {
      centered = gf.sub(sum_g.div(r).view(per_channel))
                     .sub(x_hat.mul(sum_g_xhat.div(r).view(per_channel)));
    }
    grad_input = centered.mul(scale).to(x.scalar_type());
  }
  const at::ScalarType wtype = weight.has_value() ? weight->scalar_type() : x.scalar_type();
  if (mask[1]) grad_weight = sum_g_xhat.to(wtype);
  if (mask[2]) grad_bias = sum_g.to(wtype);
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
  return true;
}

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight):
// the one class a row's target names gets -grad_output (over total_weight for a mean), every
// other element 0. Recorded as a comparison with an arange, which fuses with the log-softmax
// backward that reads it, where ATen writes a whole [N, C] tensor of zeros and scatters into it.
bool nll_loss_backward(Stack* stack) {
  constexpr size_t kArgs = 7;
  const size_t base = stack->size() - kArgs;
  const c10::IValue* a = stack->data() + base;
  if (!a[0].isTensor() || !a[1].isTensor() || !a[2].isTensor() || !a[6].isTensor()) return false;
  if (optional_tensor(a[3]).has_value()) return false;  // class weights: ATen's kernel
  const at::Tensor g = a[0].toTensor(), self = a[1].toTensor(), target = a[2].toTensor();
  const at::Tensor total_weight = a[6].toTensor();
  const int64_t reduction = a[4].toInt();
  const int64_t ignore_index = a[5].toInt();
  if (!is_float(self) || self.dim() != 2 || target.dim() != 1 || target.size(0) != self.size(0) ||
      at::isFloatingType(target.scalar_type())) {
    return false;
  }
  const at::Tensor t = target.unsqueeze(1);
  at::Tensor hit = t.eq(at::arange(self.size(1), target.options()));
  hit = hit.logical_and(t.ne(ignore_index));
  at::Tensor scale = opmath(g).neg();
  if (reduction == 0) {
    if (g.dim() != 1) return false;
    scale = scale.unsqueeze(1);
  } else if (reduction == 1) {
    scale = scale.div(total_weight.to(scale.scalar_type()));
  } else if (reduction != 2) {
    return false;
  }
  at::Tensor out = at::where(hit, scale, zero_like_scalar(scale)).to(self.scalar_type());
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out));
  return true;
}

// slice_backward(grad, input_sizes, dim, start, end, step) and select_backward(grad,
// input_sizes, dim, index): zeros with the gradient scattered in, which the scheduler computes
// element by element (Llama's rotary embedding: the two halves' gradients in one kernel with
// their sum).
bool scatter_backward(graph::OpKind kind, Stack* stack, size_t num_args) {
  const size_t base = stack->size() - num_args;
  const c10::IValue* a = stack->data() + base;
  if (!a[0].isTensor()) return false;
  const at::Tensor g = a[0].toTensor();
  const std::vector<int64_t> sizes = a[1].toIntVector();
  const int64_t dim = a[2].toInt();
  at::Tensor zeros = at::zeros(sizes, g.options());
  at::Tensor out;
  if (kind == graph::OpKind::slice_backward) {
    out = zeros.slice_scatter(g, dim, a[3].toInt(), a[4].toInt(), a[5].toInt());
  } else {
    out = zeros.select_scatter(g, dim, a[3].toInt());
  }
  torch::jit::drop(*stack, num_args);
  torch::jit::push(*stack, std::move(out));
  return true;
}

// convolution_backward(grad, input, weight, bias_sizes, stride, padding, dilation, transposed,
// output_padding, groups, output_mask): the bias's gradient as the sum of the output's gradient
// over every dim but the channels, which the scheduler fuses with the kernel that computes that
// gradient; the convolution's own gradients stay cuDNN's. Eager computes it in a reduction of its
// own (ATen's `sum`, accumulated in f32 and rounded once to the gradient's dtype, as ember's
// sum), one more read of every such gradient. The forward records the bias apart already
// (conv_bias.h).
bool convolution_backward(Stack* stack) {
  constexpr size_t kArgs = 11;
  const size_t base = stack->size() - kArgs;
  const c10::IValue* a = stack->data() + base;
  if (!a[0].isTensor() || !a[10].isBoolList()) return false;
  const at::Tensor g = a[0].toTensor();
  const c10::List<bool> mask = a[10].toBoolList();
  if (mask.size() != 3 || !mask[2] || !is_float(g) || g.dim() < 3 || as_tracer(g) == nullptr) {
    return false;
  }
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < g.dim(); ++d) dims.push_back(d);
  at::Tensor grad_bias = g.sum(dims);
  at::Tensor grad_input, grad_weight;
  if (mask[0] || mask[1]) {
    std::optional<std::vector<int64_t>> bias_sizes;
    if (!a[3].isNone()) bias_sizes = a[3].toIntVector();
    std::tie(grad_input, grad_weight, std::ignore) = at::convolution_backward(
        g, a[1].toTensor(), a[2].toTensor(),
        bias_sizes ? at::OptionalIntArrayRef(*bias_sizes) : at::OptionalIntArrayRef(),
        a[4].toIntVector(), a[5].toIntVector(), a[6].toIntVector(), a[7].toBool(),
        a[8].toIntVector(), a[9].toInt(), {mask[0], mask[1], false});
  }
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(grad_input), std::move(grad_weight), std::move(grad_bias));
  return true;
}

// The schema's arguments on top of the stack when `op` is a backward op with no overload name:
// its kind and the index of its first argument; nullopt otherwise.
std::optional<std::pair<graph::OpKind, size_t>> backward_call(const c10::OperatorHandle& op,
                                                              const Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (!schema.overload_name().empty()) return std::nullopt;
  const graph::OpKind kind = graph::op_kind(schema.name());
  if (graph::op_category(kind) != graph::OpCategory::Backward) return std::nullopt;
  const size_t num_args = schema.arguments().size();
  if (stack.size() < num_args || num_args < 2) return std::nullopt;
  return std::make_pair(kind, stack.size() - num_args);
}

}  // namespace

bool record_pointwise_backward(const c10::OperatorHandle& op, Stack* stack) {
  const auto call = backward_call(op, *stack);
  if (!call) return false;
  const auto [kind, base] = *call;
  const size_t num_args = stack->size() - base;
  // Recorded below autograd and autocast: the decompositions' ops are the graph's, as they are.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto& rules = pointwise_rules();
  if (auto it = rules.find(kind); it != rules.end()) {
    const c10::IValue& gv = (*stack)[base];
    const c10::IValue& xv = (*stack)[base + 1];
    if (!gv.isTensor() || !xv.isTensor()) return false;
    const at::Tensor g = gv.toTensor(), x = xv.toTensor();
    if (!is_float(g) || !is_float(x) || g.sizes() != x.sizes()) return false;
    if (tracer::as_tracer(g) == nullptr && tracer::as_tracer(x) == nullptr) return false;
    at::Tensor out =
        it->second(g, x, c10::ArrayRef<c10::IValue>(stack->data() + base + 2, num_args - 2));
    if (!out.defined()) return false;
    torch::jit::drop(*stack, num_args);
    torch::jit::push(*stack, std::move(out));
    return true;
  }
  using graph::OpKind;
  if (kind == OpKind::nll_loss_backward && num_args == 7) return nll_loss_backward(stack);
  if ((kind == OpKind::slice_backward && num_args == 6) ||
      (kind == OpKind::select_backward && num_args == 4)) {
    return scatter_backward(kind, stack, num_args);
  }
  return false;
}

bool record_reduction_backward(const c10::OperatorHandle& op, Stack* stack) {
  const auto call = backward_call(op, *stack);
  if (!call) return false;
  const auto [kind, base] = *call;
  const size_t num_args = stack->size() - base;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  using graph::OpKind;
  if (kind == OpKind::_softmax_backward_data || kind == OpKind::_log_softmax_backward_data) {
    const c10::IValue* a = stack->data() + base;
    if (!a[0].isTensor() || !a[1].isTensor()) return false;
    const at::Tensor g = a[0].toTensor(), y = a[1].toTensor();
    if (!is_float(g) || !is_float(y) || g.sizes() != y.sizes()) return false;
    at::Tensor out = softmax_backward(g, y, a[2].toInt(), a[3].toScalarType(),
                                      kind == OpKind::_log_softmax_backward_data);
    torch::jit::drop(*stack, num_args);
    torch::jit::push(*stack, std::move(out));
    return true;
  }
  if (kind == OpKind::native_layer_norm_backward && num_args == 8) {
    return layer_norm_backward(stack);
  }
  if (kind == OpKind::convolution_backward && num_args == 11) return convolution_backward(stack);
  return false;
}

bool record_batch_norm_backward(const c10::OperatorHandle& op, Stack* stack) {
  const auto call = backward_call(op, *stack);
  if (!call) return false;
  const auto [kind, base] = *call;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (kind == graph::OpKind::native_batch_norm_backward && stack->size() - base == 10) {
    return batch_norm_backward(stack);
  }
  return false;
}

}  // namespace ember::rewrite
