#include "rewrite/batch_norm_update.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <utility>

#include "support/error.h"
#include "tracer/convert.h"
#include "tracer/trace_session.h"

namespace ember::rewrite {

bool record_batch_norm_update(tracer::RewriteCall& call) {
  const c10::FunctionSchema& schema = call.op.schema();
  if (tracer::op_kind(schema) != graph::OpKind::native_batch_norm ||
      !schema.overload_name().empty() || call.num_args != 8) {
    return false;
  }
  torch::jit::Stack* stack = call.stack;
  const size_t base = call.base;
  const c10::IValue& training = (*stack)[base + 5];
  const c10::IValue& mean = (*stack)[base + 3];
  const c10::IValue& var = (*stack)[base + 4];
  if (!training.isBool() || !training.toBool() || !mean.isTensor() || !var.isTensor()) {
    return false;
  }
  tracer::TraceSession& session = call.session;
  const at::Tensor* mean_input = session.functional_input_holding(mean.toTensor());
  const at::Tensor* var_input = session.functional_input_holding(var.toTensor());
  if (mean_input == nullptr || var_input == nullptr || mean_input == var_input) return false;
  for (size_t i : {size_t{0}, size_t{1}, size_t{2}}) {
    const c10::IValue& v = (*stack)[base + i];
    if (v.isTensor() &&
        (v.toTensor().is_same(mean.toTensor()) || v.toTensor().is_same(var.toTensor()))) {
      return false;  // a running statistic that is also read as the input, weight or bias
    }
  }
  static const c10::OperatorHandle functional = c10::Dispatcher::singleton().findSchemaOrThrow(
      "aten::_native_batch_norm_legit_functional", "");
  session.record(functional, stack);  // same arguments; leaves its five results
  EMBER_INTERNAL_ASSERT(stack->size() == base + 5) << "_native_batch_norm_legit_functional results";
  at::Tensor new_var = stack->back().toTensor();
  stack->pop_back();
  at::Tensor new_mean = stack->back().toTensor();
  stack->pop_back();
  session.update_input(*mean_input, new_mean);
  session.update_input(*var_input, new_var);
  return true;
}

}  // namespace ember::rewrite
