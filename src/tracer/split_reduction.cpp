#include "tracer/split_reduction.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>

namespace ember::tracer {

namespace {

constexpr int64_t kMaxRows = 256;           // results: fewer than this, and the device idles
constexpr int64_t kMinRowElements = 1 << 16;  // elements per result worth splitting
constexpr int64_t kMinPartials = 1024;        // rows of the first stage
constexpr int64_t kMinChannelsPerGroup = 8;

std::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().defined()) return v.toTensor();
  return std::nullopt;
}

bool split_group_norm(torch::jit::Stack* stack) {
  // aten::native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C,
  //                         SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)
  constexpr size_t kArgs = 8;
  const size_t base = stack->size() - kArgs;
  const c10::IValue& input = (*stack)[base];
  if (!input.isTensor()) return false;
  const at::Tensor x = input.toTensor();
  const std::optional<at::Tensor> weight = optional_tensor((*stack)[base + 1]);
  const std::optional<at::Tensor> bias = optional_tensor((*stack)[base + 2]);
  const int64_t n = (*stack)[base + 3].toInt();
  const int64_t c = (*stack)[base + 4].toInt();
  const int64_t hxw = (*stack)[base + 5].toInt();
  const int64_t g = (*stack)[base + 6].toInt();
  const double eps = (*stack)[base + 7].toDouble();
  if (!x.defined() || !x.device().is_cuda() || !x.is_contiguous() || g <= 0 || c % g != 0 ||
      n * c * hxw != x.numel()) {
    return false;
  }
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 &&
      dtype != at::kHalf) {
    return false;
  }
  const int64_t d = c / g;
  const int64_t row = d * hxw;
  if (n * g >= kMaxRows || d < kMinChannelsPerGroup || row < kMinRowElements ||
      n * c < kMinPartials) {
    return false;
  }
  for (const auto& t : {weight, bias}) {
    if (t.has_value() && (t->dim() != 1 || t->size(0) != c)) return false;
  }
  // The ops below are recorded as they are: this runs below autograd already, and the caller's
  // autocast must not recast them (eager's kernel computes in the accumulation type).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xv = x.view({n, g, d, hxw});
  if (dtype != acc) xv = xv.to(acc);
  const double inv_row = 1.0 / static_cast<double>(row);
  at::Tensor mean = xv.sum(-1).sum(-1).mul(inv_row);  // [n, g]
  at::Tensor dev = xv.sub(mean.view({n, g, 1, 1}));
  at::Tensor var = dev.mul(dev).sum(-1).sum(-1).mul(inv_row);
  at::Tensor rstd = var.add(eps).rsqrt();  // [n, g]
  // Per (sample, channel): a = rstd * w, b = bias - a * mean; out = x * a + b.
  at::Tensor a = rstd.view({n, g, 1}).expand({n, g, d}).reshape({n, c});
  at::Tensor m = mean.view({n, g, 1}).expand({n, g, d}).reshape({n, c});
  if (weight.has_value()) a = a.mul(weight->to(acc).view({1, c}));
  at::Tensor b = a.mul(m).neg();
  if (bias.has_value()) b = b.add(bias->to(acc).view({1, c}));
  at::Tensor out = x.view({n, c, hxw}).to(acc).mul(a.view({n, c, 1})).add(b.view({n, c, 1}));
  out = out.to(dtype).view(x.sizes());
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out), mean.to(dtype), rstd.to(dtype));
  return true;
}

}  // namespace

bool record_split_reduction(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name() == "aten::native_group_norm" && schema.overload_name().empty() &&
      schema.arguments().size() == 8 && stack->size() >= 8) {
    return split_group_norm(stack);
  }
  return false;
}

}  // namespace ember::tracer
