#include "rewrite/log_softmax_rewrite.h"

#include <ATen/ATen.h>

#include "graph/ops.h"

namespace ember::rewrite {

namespace {
// Rows shorter than this keep `_log_softmax` (one kernel; what it saves is small).
constexpr int64_t kMinRow = 4096;
}  // namespace

std::optional<at::Tensor> log_softmax_as_logsumexp(const c10::OperatorHandle& op,
                                                   c10::ArrayRef<c10::IValue> args) {
  // _log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::_log_softmax ||
      !schema.overload_name().empty() || args.size() != 3 || !args[0].isTensor() ||
      !args[1].isInt() || !args[2].isBool()) {
    return std::nullopt;
  }
  const at::Tensor& x = args[0].toTensor();
  if (!x.defined() || x.dim() < 1) return std::nullopt;
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

std::optional<std::pair<at::Tensor, at::Tensor>> nll_loss_as_gather(
    const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  // nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction,
  //                  SymInt ignore_index) -> (Tensor output, Tensor total_weight)
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::nll_loss_forward ||
      !schema.overload_name().empty() || args.size() != 5 || !args[0].isTensor() ||
      !args[1].isTensor() || !args[3].isInt() || !args[4].isInt()) {
    return std::nullopt;
  }
  if (args[2].isTensor() && args[2].toTensor().defined()) return std::nullopt;  // class weights
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& target = args[1].toTensor();
  const int64_t reduction = args[3].toInt();
  const at::ScalarType t = self.scalar_type();
  if (!self.defined() || !target.defined() || self.dim() != 2 || self.size(1) < kMinRow ||
      (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) || target.dim() != 1 ||
      target.size(0) != self.size(0) ||
      (target.scalar_type() != at::kLong && target.scalar_type() != at::kInt) ||
      (reduction != 1 && reduction != 2)) {
    return std::nullopt;
  }
  const at::Tensor valid = target.ne(args[4].toInt());
  const at::Tensor column = at::where(valid, target, at::zeros({}, target.options()));
  const at::Tensor picked = self.gather(1, column.unsqueeze(1)).squeeze(1).to(at::kFloat);
  const at::Tensor loss = at::where(valid, picked.neg(), at::zeros({}, picked.options())).sum();
  const at::Tensor count = valid.sum(at::kFloat);
  const at::Tensor output = reduction == 1 ? loss.div(count) : loss;
  return std::make_pair(output.to(t), count.to(t));
}

}  // namespace ember::rewrite
