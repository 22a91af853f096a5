#include "tracer/log_softmax_rewrite.h"

#include <ATen/ATen.h>

#include "tracer/split_reduction.h"

namespace ember::tracer {

namespace {
// Rows shorter than this keep `_log_softmax` (one kernel; what it saves is small).
constexpr int64_t kMinRow = 4096;
}  // namespace

std::optional<at::Tensor> log_softmax_as_logsumexp(const c10::OperatorHandle& op,
                                                   c10::ArrayRef<c10::IValue> args) {
  // _log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name() != "aten::_log_softmax" || !schema.overload_name().empty() ||
      args.size() != 3 || !args[0].isTensor() || !args[1].isInt() || !args[2].isBool()) {
    return std::nullopt;
  }
  const at::Tensor& x = args[0].toTensor();
  if (!x.defined() || x.dim() < 1 || !splits_on(x)) return std::nullopt;
  const int64_t dim = args[1].toInt() < 0 ? args[1].toInt() + x.dim() : args[1].toInt();
  const at::ScalarType t = x.scalar_type();
  if (dim != x.dim() - 1 || x.size(dim) < kMinRow ||
      (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf)) {
    return std::nullopt;
  }
  const bool half_to_float = args[2].toBool();
  const at::ScalarType out_type = half_to_float ? at::kFloat : t;
  const at::Tensor x32 = x.to(at::kFloat);
  at::Tensor y = x32 - at::logsumexp(x32, {dim}, /*keepdim=*/true);
  return out_type == at::kFloat ? y : y.to(out_type);
}

}  // namespace ember::tracer
