#include "rewrite/conv_layout.h"

#include <ATen/Context.h>

#include <vector>

#include "graph/ops.h"

namespace ember::rewrite {

namespace {

constexpr auto kCL = at::MemoryFormat::ChannelsLast;

// Note [Channels-last in ATen's eyes]
// is_contiguous(ChannelsLast) ignores the strides of size-1 dims; the convolutions' layout choice
// (suggest_memory_format) does not: it falls back to NCHW for a stride it finds out of order. A
// depthwise weight [C, 1, k, k] made contiguous is channels-last contiguous (its channel dim has
// size 1) but suggests NCHW, and so does a batch-1 input [1, C, H, W] viewed from tokens
// (`x.transpose(1, 2).view(B, C, H, W)`, DaViT's and CoaT's position convolutions), whose batch
// stride is C. Taking them as channels-last already left such convolutions alone, and eager's
// CPU convolution then copied the input to NCHW (35 copies of 4.7 MB a call in davit_base_fl).

// Whether a convolution sees `t` as channels-last.
bool seen_as_channels_last(const at::Tensor& t) {
  return t.is_contiguous(kCL) && t.suggest_memory_format() == kCL;
}

// `t` with the strides at::empty gives a channels-last tensor of its sizes, which the
// convolutions see as channels-last: a view when only size-1 dims' strides differ, else a copy.
at::Tensor as_channels_last(const at::Tensor& t) {
  if (!t.is_contiguous(kCL)) return t.contiguous(kCL);
  if (t.suggest_memory_format() == kCL) return t;
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  return t.as_strided({n, c, h, w}, {h * w * c, 1, w * c, c}, t.storage_offset());
}

}  // namespace

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
  if (seen_as_channels_last(input) && seen_as_channels_last(weight)) return std::nullopt;
  // Eager's result is channels-last when its input or its weight is (cuDNN's and oneDNN's
  // layout choice): only otherwise do the graph's outputs go back to contiguous.
  *from_contiguous = input.suggest_memory_format() != kCL && weight.suggest_memory_format() != kCL;
  std::vector<c10::IValue> stack(args.begin(), args.end());
  stack[0] = as_channels_last(input);
  stack[1] = as_channels_last(weight);
  op.callBoxed(&stack);  // recorded as it is now: both operands are channels-last
  return stack[0].toTensor();
}

bool cpu_convolutions_use_onednn() {
  return at::hasMKLDNN() && at::globalContext().userEnabledMkldnn();
}

}  // namespace ember::rewrite
