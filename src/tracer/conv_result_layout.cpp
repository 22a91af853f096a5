#include "tracer/conv_result_layout.h"

#include "graph/ops.h"

namespace ember::tracer {

void convolution_layout(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                        at::Tensor& meta_result) {
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::convolution ||
      !schema.overload_name().empty() || args.size() != 9 || !args[0].isTensor() ||
      !args[1].isTensor() || !meta_result.defined()) {
    return;
  }
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor& weight = args[1].toTensor();
  if (!input.defined() || !weight.defined() || weight.dim() != 4 || meta_result.dim() != 4 ||
      !(input.device().is_cpu() ||
        (input.device().is_cuda() && input.scalar_type() != at::kDouble))) {
    return;
  }
  constexpr auto kCL = at::MemoryFormat::ChannelsLast;
  if (input.suggest_memory_format() == kCL || weight.suggest_memory_format() == kCL) {
    meta_result = meta_result.contiguous(kCL);
  }
}

}  // namespace ember::tracer
