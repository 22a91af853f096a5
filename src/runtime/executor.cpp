#include "runtime/executor.h"

#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <thread>

#include "codegen/cpp/cpp_emitter.h"
#include "sched/fusion.h"
#include "support/error.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

bool all_on_cpu(const graph::Graph& g) {
  for (const graph::Value& v : g.values) {
    if (v.type.device.kind != graph::DeviceKind::CPU) return false;
  }
  return true;
}

}  // namespace

Executor::~Executor() = default;

Executor::Step Executor::extern_step(int32_t n) const {
  const graph::Graph& g = traced_.graph;
  const graph::Node& node = g.nodes[n];
  const graph::OpInfo& info = g.op_of(node);
  auto handle = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
  EMBER_UNSUPPORTED(handle.has_value())
      << "operator " << info.qualified_name() << " is not registered in this process";
  Step step;
  step.op = *handle;
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
    } else {
      step.args.push_back(tracer::to_ivalue(a));
    }
  }
  return step;
}

Executor::Step Executor::view_step(int32_t n, graph::ValueId root) const {
  const graph::Graph& g = traced_.graph;
  Step step;
  step.view_root = root;
  const int64_t root_offset = g.type(root).storage_offset.constant();
  for (graph::ValueId v : g.nodes[n].outputs) {
    const graph::TensorType& t = g.type(v);
    ViewOutput out;
    out.value = v;
    for (const graph::DimExpr& d : t.sizes) out.sizes.push_back(d.constant());
    for (const graph::DimExpr& d : t.strides) out.strides.push_back(d.constant());
    out.offset_delta = t.storage_offset.constant() - root_offset;
    step.outputs.push_back(v);
    step.views.push_back(std::move(out));
  }
  return step;
}

Executor::Executor(tracer::TracedGraph traced, ExecutorOptions options)
    : traced_(std::move(traced)) {
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

  sched::ScheduleOptions sopts;
  sopts.fuse = options.codegen && all_on_cpu(g);
  sopts.reductions = options.reductions;
  sched::Plan plan = sched::schedule_graph(g, sopts);
  if (!plan.groups.empty()) {
    try {
      // The kernels of a graph compile as a few translation units, one per hardware thread at
      // most, in parallel: one unit per kernel would pay the compiler's start-up per kernel.
      std::vector<int> live;
      for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
        if (!plan.groups[gi].outputs.empty()) live.push_back(static_cast<int>(gi));
      }
      size_t units =
          std::min<size_t>(live.size(), std::max(1u, std::thread::hardware_concurrency()));
      std::vector<std::vector<loop::Kernel>> unit_kernels(units);
      std::vector<size_t> unit_of(plan.groups.size(), 0);
      for (size_t j = 0; j < live.size(); ++j) {
        // Contiguous chunks keep the assignment stable for a given graph (deterministic sources).
        size_t u = j * units / live.size();
        unit_kernels[u].push_back(plan.groups[live[j]].kernel);
        unit_of[live[j]] = u;
      }
      std::vector<std::string> sources;
      for (const auto& ks : unit_kernels) sources.push_back(codegen::emit_cpp_unit(ks));
      libraries_ = compile_and_load_all(sources, HostCompileOptions::from_env());
      kernel_sources_ = sources;
      std::vector<int> kernel_of_group(plan.groups.size(), -1);
      for (int gi : live) {
        const sched::KernelGroup& group = plan.groups[gi];
        Kernel k;
        k.fn = reinterpret_cast<Kernel::Fn>(
            libraries_[unit_of[gi]]->symbol(codegen::cpp_kernel_symbol(group.kernel.name)));
        k.inputs = group.inputs;
        k.outputs = group.outputs;
        k.index_status = group.index_status;
        for (graph::ValueId v : group.outputs) {
          const graph::TensorType& t = g.type(v);
          Kernel::Output out;
          for (const graph::DimExpr& d : t.sizes) out.sizes.push_back(d.constant());
          for (const graph::DimExpr& d : t.strides) out.strides.push_back(d.constant());
          out.options = at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(at::kCPU);
          k.allocations.push_back(std::move(out));
        }
        kernel_of_group[gi] = static_cast<int>(kernels_.size());
        kernels_.push_back(std::move(k));
      }
      num_fused_nodes_ = plan.num_fused_nodes;
      for (const sched::PlanStep& ps : plan.steps) {
        if (ps.kind == sched::PlanStep::Kind::Extern) {
          steps_.push_back(extern_step(ps.index));
        } else if (ps.kind == sched::PlanStep::Kind::View) {
          steps_.push_back(view_step(ps.index, ps.root));
        } else {
          Step step;
          step.kernel = kernel_of_group[ps.index];
          steps_.push_back(std::move(step));
        }
      }
      unfused_ = std::make_unique<Executor>(traced_, ExecutorOptions{.codegen = false});
    } catch (const Unsupported& e) {
      codegen_error_ = e.what();
      steps_.clear();
      kernels_.clear();
      kernel_sources_.clear();
      num_fused_nodes_ = 0;
      plan = sched::schedule_graph(g, sched::ScheduleOptions{.fuse = false});
    }
  }
  // Kernels and view steps read ATen results at their traced strides: check those per call.
  if (!kernels_.empty()) {
    std::vector<bool> read_by_code(g.values.size(), false);
    for (const Kernel& k : kernels_) {
      for (graph::ValueId v : k.inputs) read_by_code[v] = true;
    }
    for (const Step& step : steps_) {
      if (step.view_root >= 0) read_by_code[step.view_root] = true;
    }
    for (Step& step : steps_) {
      if (!step.op) continue;
      for (graph::ValueId v : step.outputs) {
        if (!read_by_code[v]) continue;
        std::vector<int64_t> strides;
        for (const graph::DimExpr& d : g.type(v).strides) strides.push_back(d.constant());
        step.check_strides.emplace_back(v, std::move(strides));
      }
    }
  }
  if (steps_.empty()) {  // no kernels: extern and view steps only
    for (const sched::PlanStep& ps : plan.steps) {
      EMBER_INTERNAL_ASSERT(ps.kind != sched::PlanStep::Kind::Kernel) << "a kernel step left";
      steps_.push_back(ps.kind == sched::PlanStep::Kind::View ? view_step(ps.index, ps.root)
                                                              : extern_step(ps.index));
    }
  }

  // Last use of each value, so intermediates are freed as soon as possible.
  std::vector<int> last_use(g.values.size(), -1);
  std::vector<int> defined_at(g.values.size(), -1);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    std::vector<graph::ValueId> reads;
    std::vector<graph::ValueId> writes;
    if (step.kernel >= 0) {
      reads = kernels_[step.kernel].inputs;
      writes = kernels_[step.kernel].outputs;
    } else if (step.view_root >= 0) {
      reads = {step.view_root};
      writes = step.outputs;
    } else {
      for (const auto& [pos, v] : step.tensor_args) reads.push_back(v);
      for (const auto& [pos, list] : step.list_args) {
        for (const auto& item : list->items) {
          if (item) reads.push_back(*item);
        }
      }
      writes = step.outputs;
    }
    for (graph::ValueId v : reads) last_use[v] = static_cast<int>(s);
    for (graph::ValueId v : writes) defined_at[v] = static_cast<int>(s);
  }
  const int keep = static_cast<int>(steps_.size());
  for (graph::ValueId v : g.outputs) last_use[v] = keep;
  for (const graph::Mutation& m : g.mutations) last_use[m.value] = keep;
  for (const graph::Input& in : g.inputs) last_use[in.value] = keep;
  for (size_t v = 0; v < last_use.size(); ++v) {
    int at = last_use[v] >= 0 ? last_use[v] : defined_at[v];  // never read: free where defined
    if (at >= 0 && at < keep) steps_[at].release.push_back(static_cast<graph::ValueId>(v));
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

bool Executor::strides_match(const std::vector<at::Tensor>& inputs) const {
  const graph::Graph& g = traced_.graph;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorType& t = g.type(input_slots_[i]);
    for (int64_t d = 0; d < inputs[i].dim(); ++d) {
      if (inputs[i].size(d) > 1 && inputs[i].stride(d) != t.strides[d].constant()) return false;
    }
  }
  return true;
}

bool Executor::run_kernel(const Kernel& k, std::vector<at::Tensor>& env) const {
  std::vector<void*> buffers;
  buffers.reserve(k.inputs.size() + k.outputs.size() + 1);
  for (graph::ValueId v : k.inputs) buffers.push_back(env[v].data_ptr());
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const Kernel::Output& out = k.allocations[i];
    at::Tensor& t = env[k.outputs[i]];
    t = at::empty_strided(out.sizes, out.strides, out.options);
    buffers.push_back(t.data_ptr());
  }
  bool index_out_of_range = false;
  if (k.index_status) buffers.push_back(&index_out_of_range);
  k.fn(buffers.data(), nullptr);
  return !index_out_of_range;
}

std::vector<at::Tensor> Executor::run(const std::vector<at::Tensor>& inputs) const {
  const graph::Graph& g = traced_.graph;
  EMBER_CHECK(inputs.size() == input_slots_.size())
      << "expected " << input_slots_.size() << " input tensors but got " << inputs.size();
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
  }
  if (unfused_ && !strides_match(inputs)) return unfused_->run(inputs);

  std::vector<at::Tensor> env(g.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[input_slots_[i]] = inputs[i];
  for (const auto& [value, index] : constant_slots_) env[value] = traced_.constants[index];

  torch::jit::Stack stack;
  for (const Step& step : steps_) {
    if (step.kernel >= 0) {
      if (!run_kernel(kernels_[step.kernel], env)) {
        // An index tensor holds an out-of-range index. Nothing is mutated before the last step:
        // the unfused program runs the ATen ops, which raise eager's error.
        EMBER_INTERNAL_ASSERT(unfused_ != nullptr) << "kernel step without an unfused program";
        return unfused_->run(inputs);
      }
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
    if (step.view_root >= 0) {
      const at::Tensor& base = env[step.view_root];
      for (const ViewOutput& v : step.views) {
        env[v.value] = base.as_strided(v.sizes, v.strides, base.storage_offset() + v.offset_delta);
      }
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
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
    step.op->callBoxed(&stack);
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
    EMBER_INTERNAL_ASSERT(k == step.outputs.size())
        << step.op->schema().name() << " returned " << k << " tensors but " << step.outputs.size()
        << " while tracing";
    for (const auto& [v, strides] : step.check_strides) {
      const at::Tensor& t = env[v];
      for (int64_t d = 0; d < t.dim(); ++d) {
        // Kernels bake the traced strides in: other ones (an ATen kernel whose layout differs
        // from its meta function's) run the call unfused, as other input strides do.
        if (t.size(d) > 1 && t.stride(d) != strides[d]) {
          EMBER_INTERNAL_ASSERT(unfused_ != nullptr) << "kernels without an unfused program";
          return unfused_->run(inputs);
        }
      }
    }
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
