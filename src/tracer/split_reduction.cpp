#include "tracer/split_reduction.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>
#include <string>
#include <vector>

namespace ember::tracer {

namespace {

constexpr int64_t kMaxRows = 256;             // results: fewer than this, and the device idles
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
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 && dtype != at::kHalf) {
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

// The split of `r` elements per row into s partials of r / s: s divides r, the partials give
// enough programs (rows * s >= kMinPartials) and each is long enough to be worth a program.
std::optional<int64_t> split_factor(int64_t rows, int64_t r) {
  for (int64_t s = 4096; s >= 32; --s) {
    if (r % s == 0 && rows * s >= kMinPartials && r / s >= 256) return s;
  }
  return std::nullopt;
}

bool split_simple_reduction(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  // aten::sum(self, *, dtype), aten::sum.dim_IntList(self, dim, keepdim, *, dtype),
  // aten::mean(self, *, dtype), aten::mean.dim(self, dim, keepdim, *, dtype),
  // aten::amax(self, dim, keepdim), aten::amin(self, dim, keepdim).
  const std::string& name = schema.name();
  const std::string& overload = schema.overload_name();
  const bool is_sum = name == "aten::sum", is_mean = name == "aten::mean";
  const bool is_max = name == "aten::amax", is_min = name == "aten::amin";
  const bool full = (is_sum || is_mean) && overload.empty();
  if (!((is_sum && (overload.empty() || overload == "dim_IntList")) ||
        (is_mean && (overload.empty() || overload == "dim")) ||
        ((is_max || is_min) && overload.empty()))) {
    return false;
  }
  const size_t num_args = schema.arguments().size();
  const size_t base = stack->size() - num_args;
  const c10::IValue& self = (*stack)[base];
  if (!self.isTensor()) return false;
  const at::Tensor x = self.toTensor();
  if (!x.defined() || !x.device().is_cuda() || !x.is_contiguous() || x.dim() == 0) return false;
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return false;
  }
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), full);
  bool keepdim = false;
  std::optional<at::ScalarType> out_dtype;
  if (!full) {
    const c10::IValue& dims = (*stack)[base + 1];
    if (!dims.isIntList()) return false;
    std::vector<int64_t> list = dims.toIntVector();
    if (list.empty()) reduced.assign(reduced.size(), true);  // every dim
    for (int64_t d : list) {
      if (d < -rank || d >= rank) return false;
      const size_t w = static_cast<size_t>(d < 0 ? d + rank : d);
      if (reduced[w]) return false;  // named twice: the op itself raises
      reduced[w] = true;
    }
    if (!(*stack)[base + 2].isBool()) return false;
    keepdim = (*stack)[base + 2].toBool();
  }
  if (is_sum || is_mean) {
    const c10::IValue& d = (*stack)[base + num_args - 1];
    if (d.isInt()) out_dtype = static_cast<at::ScalarType>(d.toInt());
    if (out_dtype && !at::isFloatingType(*out_dtype)) return false;
  }
  // The reduced dims must be the trailing ones: each row's elements are then one run.
  int64_t first = rank;
  while (first > 0 && reduced[static_cast<size_t>(first - 1)]) --first;
  for (int64_t d = 0; d < first; ++d) {
    if (reduced[static_cast<size_t>(d)]) return false;
  }
  int64_t rows = 1, r = 1;
  for (int64_t d = 0; d < rank; ++d) (d < first ? rows : r) *= x.size(d);
  if (rows >= kMaxRows || r < (int64_t{1} << 18)) return false;
  std::optional<int64_t> s = split_factor(rows, r);
  if (!s) return false;
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().begin() + first);
  if (keepdim) out_sizes.resize(static_cast<size_t>(rank), 1);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::Tensor parts = x.view({rows, *s, r / *s});
  at::Tensor out;
  if (is_max || is_min) {
    out = is_max ? parts.amax(-1).amax(-1) : parts.amin(-1).amin(-1);
  } else {
    const at::ScalarType result = out_dtype.value_or(dtype);
    const at::ScalarType acc =
        dtype == at::kDouble || result == at::kDouble ? at::kDouble : at::kFloat;
    out = parts.sum(-1, false, acc).sum(-1);
    if (is_mean) out = out.mul(1.0 / static_cast<double>(r));
    out = out.to(result);
  }
  out = out.reshape(out_sizes);
  torch::jit::drop(*stack, num_args);
  torch::jit::push(*stack, std::move(out));
  return true;
}

}  // namespace

bool record_split_reduction(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name() == "aten::native_group_norm" && schema.overload_name().empty() &&
      schema.arguments().size() == 8 && stack->size() >= 8) {
    return split_group_norm(stack);
  }
  if (stack->size() >= schema.arguments().size()) return split_simple_reduction(schema, stack);
  return false;
}

}  // namespace ember::tracer
