#include "runtime/extern_call.h"

#include <ATen/core/List.h>

#include "support/error.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

bool is_symbolic(const graph::Arg& a) {
  if (const auto* d = std::get_if<graph::DimExpr>(&a)) return !d->is_constant();
  if (const auto* ds = std::get_if<graph::Dims>(&a)) return !graph::all_constant(*ds);
  return false;
}

}  // namespace

ExternCall make_extern_call(const graph::Graph& g, int32_t n) {
  const graph::Node& node = g.nodes[n];
  const graph::OpInfo& info = g.op_of(node);
  auto handle = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
  EMBER_UNSUPPORTED(handle.has_value())
      << "operator " << info.qualified_name() << " is not registered in this process";
  ExternCall step;
  step.op = *handle;
  const c10::FunctionSchema& schema = handle->schema();
  step.outputs = node.outputs;
  step.result_slots = node.result_slots;
  step.args.reserve(node.args.size());
  for (size_t i = 0; i < node.args.size(); ++i) {
    const graph::Arg& a = node.args[i];
    if (auto* r = std::get_if<graph::ValueRef>(&a)) {
      step.tensor_args.emplace_back(static_cast<int>(i), r->id);
      step.args.emplace_back();
    } else if (auto* l = std::get_if<graph::ValueList>(&a)) {
      step.list_args.emplace_back(static_cast<int>(i), l);
      step.args.emplace_back();
    } else if (std::holds_alternative<graph::NoneArg>(a) && i < schema.arguments().size() &&
               schema.arguments()[i].type()->kind() == c10::TypeKind::TensorType) {
      // An undefined tensor where the schema's Tensor is not optional: autograd passes these
      // (_scaled_dot_product_efficient_attention_backward's attn_bias with no mask), and the
      // kernel's unboxing refuses a None there.
      step.args.emplace_back(at::Tensor());
    } else if (is_symbolic(a)) {
      step.symbolic_args.emplace_back(static_cast<int>(i), &a);
      step.args.emplace_back();
    } else {
      step.args.push_back(tracer::to_ivalue(a));
    }
  }
  return step;
}

std::vector<graph::ValueId> ExternCall::reads() const {
  std::vector<graph::ValueId> out;
  for (const auto& [pos, v] : tensor_args) out.push_back(v);
  for (const auto& [pos, list] : list_args) {
    for (const auto& item : list->items) {
      if (item) out.push_back(*item);
    }
  }
  return out;
}

void ExternCall::run(std::vector<at::Tensor>& env, torch::jit::Stack& stack,
                     const std::vector<c10::IValue>* evaluated) const {
  const ExternCall& step = *this;
  stack.assign(step.args.begin(), step.args.end());
  if (!step.symbolic_args.empty()) {
    EMBER_INTERNAL_ASSERT(evaluated != nullptr && evaluated->size() == step.symbolic_args.size())
        << step.op->schema().name() << " has " << step.symbolic_args.size()
        << " symbolic arguments but was run without their values at this call's sizes";
    for (size_t i = 0; i < step.symbolic_args.size(); ++i) {
      stack[step.symbolic_args[i].first] = (*evaluated)[i];
    }
  }
  for (const auto& [pos, v] : step.tensor_args) stack[pos] = env[v];
  for (const auto& [pos, list] : step.list_args) {
    if (list->optional_items) {
      c10::List<std::optional<at::Tensor>> l;
      for (const auto& item : list->items) {
        l.push_back(item ? std::optional<at::Tensor>(env[*item]) : std::nullopt);
      }
      stack[pos] = l;
    } else {
      c10::List<at::Tensor> l;
      for (const auto& item : list->items) l.push_back(env[*item]);
      stack[pos] = l;
    }
  }
  step.op->callBoxed(&stack);
  // Results are matched to outputs by position among the tensor results, so an optional result
  // that is undefined here but was defined while tracing (or the reverse) keeps the others in
  // place. Kernels may leave out optional results that meta kernels return (cuDNN attention).
  // With as many tensor results as the trace had, they match by position, undefined ones
  // included: native_batch_norm_backward with output_mask [False, True, True] returns no grad_input
  // on the CPU where its meta kernel returned one (nothing reads it).
  size_t num_results = 0;
  for (const c10::IValue& r : stack) {
    if (r.isTensor()) ++num_results;
    if (r.isTensorList()) num_results += r.toTensorList().size();
  }
  const bool by_position = num_results == step.outputs.size();
  size_t k = 0;
  int32_t slot = 0;
  auto take = [&](const at::Tensor& t) {
    int32_t this_slot = slot++;
    // A tensor subclass written in Python (a wrapper without storage of its own, such as a
    // functional collective's AsyncCollectiveTensor) where the op's meta kernel gave a plain
    // tensor: a kernel reading its data pointer would read nothing there.
    EMBER_UNSUPPORTED(!t.defined() || !t.key_set().has(c10::DispatchKey::Python))
        << step.op->schema().name() << " returned a tensor subclass at run time where it "
        << "returned a plain tensor while tracing; ember's steps read plain tensors";
    if (step.result_slots.empty()) {
      if (!t.defined() && !by_position) return;
      EMBER_INTERNAL_ASSERT(k < step.outputs.size())
          << step.op->schema().name() << " returned more tensors than it did while tracing";
      env[step.outputs[k++]] = t;
    } else if (k < step.outputs.size() && step.result_slots[k] == this_slot) {
      env[step.outputs[k++]] = t;
    }
  };
  for (const c10::IValue& r : stack) {
    if (r.isTensor()) {
      take(r.toTensor());
    } else if (r.isTensorList()) {
      for (at::Tensor t : r.toTensorList()) take(t);
    }
  }
  // The results live in `env` only: a dead one can then be freed, or written in place, at once.
  stack.clear();
  EMBER_INTERNAL_ASSERT(k == step.outputs.size())
      << step.op->schema().name() << " returned " << k << " tensors but " << step.outputs.size()
      << " while tracing";
}

}  // namespace ember::runtime
