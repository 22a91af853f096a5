#include "rewrite/conv_layout.h"

#include <ATen/Context.h>

#include <vector>

#include "graph/ops.h"

namespace ember::rewrite {

std::optional<at::Tensor> channels_last_convolution(const c10::OperatorHandle& op,
                                                    c10::ArrayRef<c10::IValue> args,
                                                    bool* from_contiguous, bool grouped) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
  //             groups)
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::convolution ||
      !schema.overload_name().empty() || args.size() != 9 || !args[0].isTensor() ||
      !args[1].isTensor() || !args[6].isBool() || !args[8].isInt()) {
    return std::nullopt;
  }
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor& weight = args[1].toTensor();
  if (!input.defined() || !weight.defined() || input.dim() != 4 || weight.dim() != 4 ||
      args[6].toBool()) {
    return std::nullopt;
  }
  const at::ScalarType t = input.scalar_type();
  if (t != at::kBFloat16 && t != at::kHalf && t != at::kFloat) return std::nullopt;
  if (!grouped && args[8].toInt() > 1 && weight.size(1) > 1) return std::nullopt;
  constexpr auto kCL = at::MemoryFormat::ChannelsLast;
  if (input.is_contiguous(kCL) && weight.is_contiguous(kCL)) return std::nullopt;
  // Eager's result is channels-last when its input or its weight is (cuDNN's and oneDNN's
  // layout choice): only otherwise do the graph's outputs go back to contiguous.
  *from_contiguous = input.suggest_memory_format() != kCL && weight.suggest_memory_format() != kCL;
  std::vector<c10::IValue> stack(args.begin(), args.end());
  stack[0] = input.contiguous(kCL);
  stack[1] = weight.contiguous(kCL);
  op.callBoxed(&stack);  // recorded as it is now: both operands are channels-last
  return stack[0].toTensor();
}

bool cpu_convolutions_use_onednn() {
  return at::hasMKLDNN() && at::globalContext().userEnabledMkldnn();
}

}  // namespace ember::rewrite
