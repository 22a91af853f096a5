#include "rewrite/attention_rewrite.h"

#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_scaled_dot_product_attention_math.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <mutex>
#include <optional>

#include "support/error.h"

namespace ember::rewrite {

namespace {

// A boolean mask constant along the keys: one decision per query row.
bool is_row_mask(const at::Tensor& mask) {
  return mask.scalar_type() == at::kBool && mask.dim() >= 1 && mask.size(-1) > 1 &&
         mask.stride(-1) == 0;
}

void attention_kernel(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  // aten::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, *,
  //                                    scale, enable_gqa)
  constexpr size_t kArgs = 8;
  const size_t base = stack->size() - kArgs;
  const at::Tensor query = (*stack)[base].toTensor();
  const at::Tensor key = (*stack)[base + 1].toTensor();
  const at::Tensor value = (*stack)[base + 2].toTensor();
  const c10::IValue& mask_arg = (*stack)[base + 3];
  std::optional<at::Tensor> mask;
  if (mask_arg.isTensor()) mask = mask_arg.toTensor();
  const double dropout_p = (*stack)[base + 4].toDouble();
  const bool is_causal = (*stack)[base + 5].toBool();
  std::optional<double> scale;
  if (!(*stack)[base + 6].isNone()) scale = (*stack)[base + 6].toDouble();
  const bool enable_gqa = (*stack)[base + 7].toBool();

  // (The row-mask rewrite reads sizes as numbers: not with shape symbols.)
  auto symbolic = [](const at::Tensor& t) {
    return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
  };
  std::optional<at::Tensor> row;
  if (mask.has_value() && mask->defined() && !is_causal && !symbolic(*mask) && !symbolic(query) &&
      !symbolic(value) && is_row_mask(*mask) && query.dim() >= 2 && value.dim() >= 1) {
    std::vector<int64_t> out_sizes(query.sizes().begin(), query.sizes().end());
    out_sizes.back() = value.size(-1);
    at::Tensor candidate = mask->narrow(-1, 0, 1);
    if (candidate.dim() <= query.dim() &&
        at::infer_size(candidate.sizes(), out_sizes) == out_sizes) {
      row = candidate;
    }
  }
  at::Tensor out;
  if (row.has_value()) {
    // Note [f32 attention on CUDA] in the header.
    const bool math = query.device().is_cuda() && query.scalar_type() == at::kFloat &&
                      at::globalContext().allowTF32CuBLAS() && dropout_p == 0.0;
    at::Tensor unmasked =
        math ? std::get<0>(at::_scaled_dot_product_attention_math(
                   query, key, value, std::nullopt, 0.0, false, std::nullopt, scale, enable_gqa))
             : at::native::scaled_dot_product_attention(query, key, value, std::nullopt, dropout_p,
                                                        false, scale, enable_gqa);
    out = at::where(*row, unmasked, 0);
    // Eager's result on CUDA is the math decomposition's, contiguous; the fused kernels return
    // [batch, queries, heads, dim] permuted. The where's kernel writes eager's layout.
    if (query.device().is_cuda()) out = out.contiguous();
  } else {
    out = at::native::scaled_dot_product_attention(query, key, value, mask, dropout_p, is_causal,
                                                   scale, enable_gqa);
  }
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace

void register_attention_rewrite() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    c10::OperatorName name("aten::scaled_dot_product_attention", "");
    // Never skipped (as the ops the tracer records whole, tracer/dispatch.cpp).
    EMBER_UNSUPPORTED(dispatcher.findOp(name).has_value())
        << "this torch has no operator aten::scaled_dot_product_attention, which ember's rewrites "
           "register a kernel "
        << "on (attention_rewrite.h): a torch version ember does not support";
    // Leaked on purpose, as the tracer's other registrations (tracer/dispatch.cpp).
    new c10::RegistrationHandleRAII(
        dispatcher.registerImpl(name, c10::DispatchKey::AutogradPrivateUse1,
                                c10::KernelFunction::makeFromBoxedFunction<&attention_kernel>(),
                                std::nullopt, nullptr, "ember tracer: attention rewrite"));
  });
}

}  // namespace ember::rewrite
