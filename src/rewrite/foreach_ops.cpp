#include "rewrite/foreach_ops.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ember::rewrite {

namespace {

constexpr std::string_view kPrefix = "aten::_foreach_";

// Whether the foreach argument type `f` becomes the per-tensor argument type `b`; `*list` is set
// when `f` is a list whose i-th element is passed.
bool matches(const c10::TypePtr& f, const c10::TypePtr& b, bool* list) {
  *list = false;
  if (const auto l = f->cast<c10::ListType>()) {
    const c10::TypePtr& e = l->getElementType();
    if ((e->kind() == c10::TypeKind::TensorType && b->kind() == c10::TypeKind::TensorType) ||
        (e->kind() == c10::TypeKind::NumberType && b->kind() == c10::TypeKind::NumberType)) {
      *list = true;
      return true;
    }
  }
  return *f == *b;
}

struct PerTensor {
  std::optional<c10::OperatorHandle> op;
  std::vector<bool> list;  // per argument: pass the i-th element
};

// The per-tensor op of a foreach op, found once per foreach op.
const PerTensor& per_tensor_op(const c10::OperatorHandle& op) {
  static std::mutex mu;
  static std::map<std::string, PerTensor> found;
  const c10::FunctionSchema& schema = op.schema();
  const std::string key = c10::toString(schema.operator_name());
  std::lock_guard<std::mutex> lock(mu);
  auto it = found.find(key);
  if (it != found.end()) return it->second;
  PerTensor out;
  const std::string base = "aten::" + schema.name().substr(kPrefix.size());
  for (const char* overload :
       {"", "Tensor", "Scalar", "Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor", "Self"}) {
    auto candidate = c10::Dispatcher::singleton().findOp({base, overload});
    if (!candidate.has_value()) continue;
    const c10::FunctionSchema& b = candidate->schema();
    // The per-tensor op may take more arguments, with defaults (add.Scalar's alpha).
    if (b.arguments().size() < schema.arguments().size() || b.returns().size() != 1) continue;
    bool ok = true;
    for (size_t i = schema.arguments().size(); i < b.arguments().size(); ++i) {
      ok = ok && b.arguments()[i].default_value().has_value();
    }
    std::vector<bool> list;
    for (size_t i = 0; i < schema.arguments().size() && ok; ++i) {
      bool l = false;
      ok = matches(schema.arguments()[i].type(), b.arguments()[i].type(), &l);
      list.push_back(l);
    }
    if (!ok) continue;
    out.op = candidate;
    out.list = std::move(list);
    break;
  }
  return found.emplace(key, std::move(out)).first->second;
}

}  // namespace

bool record_foreach_as_per_tensor_ops(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name().rfind(kPrefix, 0) != 0) return false;
  const PerTensor& per = per_tensor_op(op);
  if (!per.op.has_value()) return false;
  const size_t num_args = schema.arguments().size();
  const size_t base = stack->size() - num_args;
  // Every list argument has the same length, that of the result.
  std::optional<size_t> n;
  for (size_t a = 0; a < num_args; ++a) {
    if (!per.list[a]) continue;
    const c10::IValue& v = (*stack)[base + a];
    const size_t len = v.isTensorList() ? v.toTensorList().size() : v.toListRef().size();
    if (n.has_value() && *n != len) return false;  // ATen raises: let it
    n = len;
  }
  if (!n.has_value()) return false;
  const bool returns_list = !schema.returns().empty();
  c10::List<at::Tensor> results;
  for (size_t i = 0; i < *n; ++i) {
    torch::jit::Stack call;
    call.reserve(num_args);
    for (size_t a = 0; a < num_args; ++a) {
      const c10::IValue& v = (*stack)[base + a];
      if (!per.list[a]) {
        call.push_back(v);
      } else if (v.isTensorList()) {
        call.emplace_back(v.toTensorList().get(i));
      } else {
        call.push_back(v.toListRef()[i]);
      }
    }
    const auto& extra = per.op->schema().arguments();
    for (size_t a = num_args; a < extra.size(); ++a) call.push_back(*extra[a].default_value());
    per.op->callBoxed(call);
    if (returns_list) results.push_back(call.at(0).toTensor());
  }
  torch::jit::drop(*stack, num_args);
  if (returns_list) torch::jit::push(*stack, std::move(results));
  return true;
}

}  // namespace ember::rewrite
