#include "tracer/batch_norm_rewrite.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/batch_norm_native.h>
#include <ATen/ops/native_batch_norm.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

namespace ember::tracer {

namespace {

std::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor();
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
  const char* env = std::getenv("EMBER_CUDNN_BATCH_NORM");
  const bool rewrite = env != nullptr && std::string_view(env) == "0";
  if (rewrite && training && input.device().is_cuda() && input.dim() >= 2 && input.numel() > 0) {
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

void register_batch_norm_rewrite() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    c10::OperatorName name("aten::batch_norm", "");
    if (!dispatcher.findOp(name)) return;
    // Leaked on purpose, as the tracer's other registrations (dispatch.cpp).
    new c10::RegistrationHandleRAII(
        dispatcher.registerImpl(name, c10::DispatchKey::AutogradPrivateUse1,
                                c10::KernelFunction::makeFromBoxedFunction<&batch_norm_kernel>(),
                                std::nullopt, nullptr, "ember tracer: batch norm rewrite"));
  });
}

}  // namespace ember::tracer
