#include "rewrite/conv_bias.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <vector>

#include "graph/ops.h"

namespace ember::rewrite {

std::optional<at::Tensor> convolution_bias_apart(const c10::OperatorHandle& op,
                                                 c10::ArrayRef<c10::IValue> args) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
  //             groups)
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::convolution ||
      !schema.overload_name().empty() || args.size() != 9 || !args[0].isTensor() ||
      !args[1].isTensor() || !args[2].isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor& weight = args[1].toTensor();
  const at::Tensor& bias = args[2].toTensor();
  if (!input.defined() || !weight.defined() || !bias.defined() || input.dim() < 3 ||
      weight.dim() != input.dim() || bias.dim() != 1 || !args[6].isBool() || !args[8].isInt()) {
    return std::nullopt;
  }
  const int64_t out_channels = args[6].toBool() ? weight.size(1) * args[8].toInt() : weight.size(0);
  if (bias.size(0) != out_channels) return std::nullopt;  // eager refuses it: let it say so
  const at::ScalarType t = input.scalar_type();
  if ((t != at::kBFloat16 && t != at::kHalf && t != at::kFloat) || bias.scalar_type() != t ||
      weight.scalar_type() != t) {
    return std::nullopt;
  }
  if (at::GradMode::is_enabled() &&
      (input.requires_grad() || weight.requires_grad() || bias.requires_grad())) {
    return std::nullopt;
  }
  std::vector<c10::IValue> stack(args.begin(), args.end());
  stack[2] = c10::IValue();  // None
  op.callBoxed(&stack);      // the convolution alone, recorded (and laid out) as any other
  at::Tensor out = stack[0].toTensor();
  std::vector<int64_t> shape(static_cast<size_t>(out.dim()), 1);
  shape[1] = bias.size(0);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return out.add(bias.view(shape));
}

}  // namespace ember::rewrite
