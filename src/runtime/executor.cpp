#include "runtime/executor.h"

#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>

#include "support/error.h"
#include "tracer/convert.h"

namespace ember::runtime {

Executor::Executor(tracer::TracedGraph traced) : traced_(std::move(traced)) {
  const graph::Graph& g = traced_.graph;
  int constant_index = 0;
  for (const graph::Input& in : g.inputs) {
    if (in.kind == graph::InputKind::Constant) {
      constant_slots_.emplace_back(in.value, constant_index++);
    } else {
      input_slots_.push_back(in.value);
    }
  }
  EMBER_INTERNAL_ASSERT(constant_index == static_cast<int>(traced_.constants.size()))
      << "graph has " << constant_index << " constant inputs but " << traced_.constants.size()
      << " constants";

  for (const graph::Mutation& m : g.mutations) {
    for (size_t i = 0; i < input_slots_.size(); ++i) {
      if (input_slots_[i] == m.input) mutated_input_positions_.push_back(i);
    }
  }

  // Last use of each value, so intermediates are freed as soon as possible.
  std::vector<int> last_use(g.values.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (const graph::Arg& a : g.nodes[n].args) {
      if (auto* r = std::get_if<graph::ValueRef>(&a)) last_use[r->id] = static_cast<int>(n);
      if (auto* l = std::get_if<graph::ValueList>(&a)) {
        for (const auto& item : l->items) {
          if (item) last_use[*item] = static_cast<int>(n);
        }
      }
    }
  }
  const int keep = static_cast<int>(g.nodes.size());
  for (graph::ValueId v : g.outputs) last_use[v] = keep;
  for (const graph::Mutation& m : g.mutations) last_use[m.value] = keep;
  for (const graph::Input& in : g.inputs) last_use[in.value] = keep;

  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node& node = g.nodes[n];
    const graph::OpInfo& info = g.op_of(node);
    auto handle = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
    EMBER_UNSUPPORTED(handle.has_value())
        << "operator " << info.qualified_name() << " is not registered in this process";
    Step step{*handle, {}, {}, {}, node.outputs, node.result_slots, {}};
    step.args.reserve(node.args.size());
    for (size_t i = 0; i < node.args.size(); ++i) {
      const graph::Arg& a = node.args[i];
      if (auto* r = std::get_if<graph::ValueRef>(&a)) {
        step.tensor_args.emplace_back(static_cast<int>(i), r->id);
        step.args.emplace_back();
      } else if (auto* l = std::get_if<graph::ValueList>(&a)) {
        step.list_args.emplace_back(static_cast<int>(i), l);
        step.args.emplace_back();
      } else {
        step.args.push_back(tracer::to_ivalue(a));
      }
    }
    for (size_t v = 0; v < last_use.size(); ++v) {
      if (last_use[v] == static_cast<int>(n))
        step.release.push_back(static_cast<graph::ValueId>(v));
    }
    for (graph::ValueId out : node.outputs) {
      if (last_use[out] < 0) step.release.push_back(out);  // never used: free at once
    }
    steps_.push_back(std::move(step));
  }
}

bool Executor::mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const {
  for (size_t m : mutated_input_positions_) {
    if (m >= inputs.size() || !inputs[m].has_storage()) continue;
    const c10::StorageImpl* storage = inputs[m].storage().unsafeGetStorageImpl();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i != m && inputs[i].defined() && inputs[i].has_storage() &&
          inputs[i].storage().unsafeGetStorageImpl() == storage) {
        return true;
      }
    }
  }
  return false;
}

std::vector<at::Tensor> Executor::run(const std::vector<at::Tensor>& inputs) const {
  const graph::Graph& g = traced_.graph;
  EMBER_CHECK(inputs.size() == input_slots_.size())
      << "expected " << input_slots_.size() << " input tensors but got " << inputs.size();
  std::vector<at::Tensor> env(g.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorType& t = g.type(input_slots_[i]);
    const at::Tensor& x = inputs[i];
    EMBER_CHECK(x.defined()) << "input " << i << " is an undefined tensor";
    EMBER_CHECK(tracer::to_graph(x.scalar_type()) == t.dtype && x.dim() == t.dim())
        << "input " << i << " has dtype " << x.scalar_type() << " and " << x.dim()
        << " dims, but the graph was traced for " << graph::type_str(t);
    for (int64_t d = 0; d < x.dim(); ++d) {
      EMBER_CHECK(x.size(d) == t.sizes[d].constant())
          << "input " << i << " has size " << x.sizes() << ", but the graph was traced for "
          << graph::type_str(t);
    }
    env[input_slots_[i]] = x;
  }
  for (const auto& [value, index] : constant_slots_) env[value] = traced_.constants[index];

  torch::jit::Stack stack;
  for (const Step& step : steps_) {
    stack.assign(step.args.begin(), step.args.end());
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
    step.op.callBoxed(&stack);
    // Results are matched to outputs by position among the tensor results, so an optional result
    // that is undefined here but was defined while tracing (or the reverse) keeps the others in
    // place. Kernels may leave out optional results that meta kernels return (cuDNN attention).
    size_t k = 0;
    int32_t slot = 0;
    auto take = [&](const at::Tensor& t) {
      int32_t this_slot = slot++;
      if (step.result_slots.empty()) {
        if (!t.defined()) return;
        EMBER_INTERNAL_ASSERT(k < step.outputs.size())
            << step.op.schema().name() << " returned more tensors than it did while tracing";
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
    EMBER_INTERNAL_ASSERT(k == step.outputs.size())
        << step.op.schema().name() << " returned " << k << " tensors but " << step.outputs.size()
        << " while tracing";
    for (graph::ValueId v : step.release) env[v].reset();
  }
  if (!g.mutations.empty()) {
    at::NoGradGuard no_grad;  // as eager updates BatchNorm's running statistics
    for (const graph::Mutation& m : g.mutations) env[m.input].copy_(env[m.value]);
  }
  std::vector<at::Tensor> outs;
  outs.reserve(g.outputs.size());
  for (graph::ValueId v : g.outputs) outs.push_back(env[v]);
  return outs;
}

}  // namespace ember::runtime
