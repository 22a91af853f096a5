#include "rewrite/batch_norm_inference.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>
#include <string>
#include <string_view>

#include "graph/ops.h"

namespace ember::rewrite {

namespace {

const c10::IValue* named(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                         std::string_view name) {
  for (size_t i = 0; i < schema.arguments().size() && i < args.size(); ++i) {
    if (schema.arguments()[i].name() == name) return &args[i];
  }
  return nullptr;
}

std::optional<at::Tensor> tensor(const c10::IValue* v) {
  if (v != nullptr && v->isTensor() && v->toTensor().defined()) return v->toTensor();
  return std::nullopt;
}

}  // namespace

bool record_batch_norm_inference(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  using graph::OpKind;
  const OpKind kind = graph::op_kind(schema.name());
  const bool no_training = kind == OpKind::_native_batch_norm_legit_no_training;
  if (!schema.overload_name().empty() ||
      (!no_training && kind != OpKind::cudnn_batch_norm && kind != OpKind::native_batch_norm &&
       kind != OpKind::_native_batch_norm_legit)) {
    return false;
  }
  const size_t num_args = schema.arguments().size();
  if (stack->size() < num_args) return false;
  const c10::ArrayRef<c10::IValue> args(stack->data() + stack->size() - num_args, num_args);
  if (!no_training) {
    const c10::IValue* training = named(schema, args, "training");
    if (training == nullptr || !training->isBool() || training->toBool()) return false;
  }
  const c10::IValue* eps_arg = named(schema, args, "eps");
  if (eps_arg == nullptr) eps_arg = named(schema, args, "epsilon");
  std::optional<at::Tensor> x = tensor(named(schema, args, "input"));
  std::optional<at::Tensor> weight = tensor(named(schema, args, "weight"));
  std::optional<at::Tensor> bias = tensor(named(schema, args, "bias"));
  std::optional<at::Tensor> mean = tensor(named(schema, args, "running_mean"));
  std::optional<at::Tensor> var = tensor(named(schema, args, "running_var"));
  if (!x || !mean || !var || eps_arg == nullptr || !eps_arg->isDouble() || x->dim() < 2) {
    return false;
  }
  const at::ScalarType dtype = x->scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return false;
  }
  const int64_t c = x->size(1);
  for (const auto& t : {weight, bias, mean, var}) {
    if (t.has_value() && (t->dim() != 1 || t->size(0) != c || !t->is_floating_point())) {
      return false;
    }
  }
  if (at::GradMode::is_enabled()) {
    for (const auto& t : {x, weight, bias, mean, var}) {
      if (t.has_value() && t->requires_grad()) return false;  // training: the op's backward
    }
  }
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor alpha = var->to(acc).add(eps_arg->toDouble()).sqrt().reciprocal();
  if (weight) alpha = alpha.mul(weight->to(acc));
  at::Tensor shift = mean->to(acc).mul(alpha);
  at::Tensor beta = bias ? bias->to(acc).sub(shift) : shift.neg();
  std::vector<int64_t> shape(static_cast<size_t>(x->dim()), 1);
  shape[1] = c;
  at::Tensor out = x->to(acc).mul(alpha.view(shape)).add(beta.view(shape)).to(dtype);
  // Eval mode's statistics outputs are empty, in the running statistics' dtype.
  at::Tensor empty = mean->narrow(0, 0, 0);
  torch::jit::drop(*stack, num_args);
  const size_t results = schema.returns().size();
  torch::jit::push(*stack, std::move(out));
  for (size_t i = 1; i < results; ++i) {
    const bool bytes = schema.returns()[i].type()->kind() == c10::TypeKind::TensorType &&
                       kind == OpKind::cudnn_batch_norm && i == 3;  // cuDNN's reserve space
    torch::jit::push(*stack, bytes ? empty.to(at::kByte) : empty);
  }
  return true;
}

}  // namespace ember::rewrite
