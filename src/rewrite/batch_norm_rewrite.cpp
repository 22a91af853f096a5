#include "rewrite/batch_norm_rewrite.h"
#include "tracer/trace_session.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/batch_norm_native.h>
#include <ATen/ops/native_batch_norm.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "graph/ops.h"
#include "support/error.h"

namespace ember::rewrite {

using tracer::trace_options;

namespace {

std::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().defined()) return v.toTensor();
  return std::nullopt;
}

void batch_norm_kernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  // aten::batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum,
  //                  eps, cudnn_enabled) -> Tensor
  constexpr size_t kArgs = 9;
  const size_t base = stack->size() - kArgs;
  const at::Tensor input = (*stack)[base].toTensor();
  const std::optional<at::Tensor> weight = optional_tensor((*stack)[base + 1]);
  const std::optional<at::Tensor> bias = optional_tensor((*stack)[base + 2]);
  const std::optional<at::Tensor> running_mean = optional_tensor((*stack)[base + 3]);
  const std::optional<at::Tensor> running_var = optional_tensor((*stack)[base + 4]);
  const bool training = (*stack)[base + 5].toBool();
  const double momentum = (*stack)[base + 6].toDouble();
  const double eps = (*stack)[base + 7].toDouble();
  const bool cudnn_enabled = (*stack)[base + 8].toBool();
  at::Tensor out;
  const bool rewrite =
      trace_options().cudnn_batch_norm == CompileOptions::Trace::CudnnBatchNorm::Off;
  if (rewrite && training && input.device().is_cuda() && input.dim() >= 2 &&
      input.sym_numel() > 0) {
    out = std::get<0>(at::native_batch_norm(input, weight, bias, running_mean, running_var,
                                            training, momentum, eps));
  } else {
    out = at::native::batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                                 eps, cudnn_enabled);
  }
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace

std::optional<CudnnNormalization> cudnn_normalization(const c10::OperatorHandle& op,
                                                      const torch::jit::Stack& stack) {
  // aten::cudnn_batch_norm(input, weight, bias?, running_mean?, running_var?, training,
  //                        exponential_average_factor, epsilon) -> (Tensor, Tensor, Tensor, Tensor)
  const c10::FunctionSchema& schema = op.schema();
  constexpr size_t kArgs = 8;
  if (graph::op_kind(schema.name()) != graph::OpKind::cudnn_batch_norm ||
      !schema.overload_name().empty() || schema.arguments().size() != kArgs ||
      stack.size() < kArgs) {
    return std::nullopt;
  }
  // The default (Stats); Keep keeps cuDNN's output, Off leaves cuDNN (above).
  if (trace_options().cudnn_batch_norm != CompileOptions::Trace::CudnnBatchNorm::Stats) {
    return std::nullopt;
  }
  const size_t base = stack.size() - kArgs;
  const c10::IValue& input = stack[base];
  if (!input.isTensor() || !stack[base + 5].isBool() || !stack[base + 5].toBool()) {
    return std::nullopt;
  }
  CudnnNormalization n{input.toTensor(), optional_tensor(stack[base + 1]),
                       optional_tensor(stack[base + 2])};
  if (!n.x.defined() || n.x.dim() < 2 || n.x.numel() == 0) {
    return std::nullopt;
  }
  const int64_t c = n.x.size(1);
  for (const auto& t : {n.weight, n.bias}) {
    if (t.has_value() && (t->dim() != 1 || t->size(0) != c)) return std::nullopt;
  }
  return n;
}

void normalize_from_statistics(const CudnnNormalization& n, torch::jit::Stack* stack) {
  EMBER_INTERNAL_ASSERT(stack->size() >= 4) << "cudnn_batch_norm: four results expected";
  const size_t base = stack->size() - 4;
  const at::Tensor mean = (*stack)[base + 1].toTensor();
  const at::Tensor invstd = (*stack)[base + 2].toTensor();
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType dtype = n.x.scalar_type();
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<int64_t> per_channel(static_cast<size_t>(n.x.dim()), 1);
  per_channel[1] = n.x.size(1);
  at::Tensor a = invstd.to(acc);
  if (n.weight.has_value()) a = a.mul(n.weight->to(acc));
  at::Tensor y = n.x.to(acc).sub(mean.to(acc).view(per_channel)).mul(a.view(per_channel));
  if (n.bias.has_value()) y = y.add(n.bias->to(acc).view(per_channel));
  (*stack)[base] = y.to(dtype);
}

void register_batch_norm_rewrite() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    c10::OperatorName name("aten::batch_norm", "");
    // Never skipped (as the ops the tracer records whole, tracer/dispatch.cpp).
    EMBER_UNSUPPORTED(dispatcher.findOp(name).has_value())
        << "this torch has no operator aten::batch_norm, which ember's rewrites register a kernel "
        << "on (batch_norm_rewrite.h): a torch version ember does not support";
    // Leaked on purpose, as the tracer's other registrations (tracer/dispatch.cpp).
    new c10::RegistrationHandleRAII(
        dispatcher.registerImpl(name, c10::DispatchKey::AutogradPrivateUse1,
                                c10::KernelFunction::makeFromBoxedFunction<&batch_norm_kernel>(),
                                std::nullopt, nullptr, "ember tracer: batch norm rewrite"));
  });
}

}  // namespace ember::rewrite
