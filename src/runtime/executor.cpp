#include "runtime/executor.h"

#include <ATen/Context.h>
#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_set>

#include "codegen/cpp/cpp_emitter.h"
#include "runtime/causal_attention.h"
#include "runtime/constant_fold.h"
#include "runtime/executor_internal.h"
#include "sched/fusion.h"
#include "sched/memory_plan.h"
#include "support/error.h"
#include "support/hash.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

// The alias sets `a` names, its list elements' included (`Tensor(a)[]`).
void add_alias_sets(const c10::AliasInfo* a, std::set<c10::Symbol>& out) {
  if (a == nullptr) return;
  out.insert(a->beforeSets().begin(), a->beforeSets().end());
  for (const c10::AliasInfo& c : a->containedTypes()) add_alias_sets(&c, out);
}

bool writes(const c10::AliasInfo* a) {
  if (a == nullptr) return false;
  if (a->isWrite()) return true;
  for (const c10::AliasInfo& c : a->containedTypes()) {
    if (writes(&c)) return true;
  }
  return false;
}

// Ops that return a view of their input without saying so in their schema.
bool unannotated_view(const c10::FunctionSchema& schema) {
  return schema.name() == "aten::_unsafe_view";
}

// Whether the results of `schema` may share memory with its arguments.
bool returns_aliases(const c10::FunctionSchema& schema) {
  if (unannotated_view(schema)) return true;
  for (const c10::Argument& r : schema.returns()) {
    if (r.alias_info() != nullptr) return true;
  }
  return false;
}

bool all_on_cpu(const graph::Graph& g) {
  for (const graph::Value& v : g.values) {
    if (v.type.device.kind != graph::DeviceKind::CPU) return false;
  }
  return true;
}

/// The CUDA device index every value of `g` is on, or -1. 0-dim CPU tensors (scalars a graph
/// holds as constants) do not count: the executor moves them to the device.
int one_cuda_device(const graph::Graph& g) {
  int index = -2;
  for (const graph::Value& v : g.values) {
    if (v.type.device.kind == graph::DeviceKind::CPU && v.type.dim() == 0) continue;
    if (v.type.device.kind != graph::DeviceKind::CUDA) return -1;
    int i = std::max<int>(v.type.device.index, 0);
    if (index != -2 && index != i) return -1;
    index = i;
  }
  return index < 0 ? -1 : index;
}

bool triton_enabled() {
  const char* e = std::getenv("EMBER_TRITON");
  return e == nullptr || std::string(e) != "0";
}

/// EMBER_TRITON_INTERPRET=1: CPU graphs run Triton kernels in Triton's interpreter (as
/// ExecutorOptions::triton_interpret), to test the GPU code generator on whole models.
bool triton_interpret_env() {
  const char* e = std::getenv("EMBER_TRITON_INTERPRET");
  return e != nullptr && std::string(e) == "1";
}

/// EMBER_COMBO_KERNELS=0: independent pointwise kernels stay apart (sched/combo.h).
bool combo_kernels_enabled() {
  const char* e = std::getenv("EMBER_COMBO_KERNELS");
  return e == nullptr || std::string(e) != "0";
}

/// Whether node `n`, of an op tagged nondeterministic_seeded, draws random numbers: not when its
/// dropout probability is a constant 0 (the attention kernels' `dropout_p`) or it is a dropout
/// with `train` false.
bool draws_random_numbers(const graph::Node& n, const c10::FunctionSchema& schema) {
  const auto& params = schema.arguments();
  for (size_t i = 0; i < params.size() && i < n.args.size(); ++i) {
    const std::string& name = params[i].name();
    if (name == "dropout_p" ||
        (name == "p" && schema.name().find("dropout") != std::string::npos)) {
      const double* p = std::get_if<double>(&n.args[i]);
      const int64_t* ip = std::get_if<int64_t>(&n.args[i]);
      if ((p != nullptr && *p == 0.0) || (ip != nullptr && *ip == 0)) return false;
    }
    if (name == "train") {
      const bool* train = std::get_if<bool>(&n.args[i]);
      if (train != nullptr && !*train) return false;
    }
  }
  return true;
}

/// The first op of `g` that draws random numbers (rand, dropout, ...: tagged
/// nondeterministic_seeded, draws_random_numbers), or "".
std::string first_seeded_op(const graph::Graph& g) {
  for (const graph::Node& n : g.nodes) {
    const graph::OpInfo& info = g.op_of(n);
    auto op = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
    if (op.has_value() && op->hasTag(at::Tag::nondeterministic_seeded) &&
        draws_random_numbers(n, op->schema())) {
      return info.qualified_name();
    }
  }
  return "";
}

}  // namespace

bool has_layout(const at::Tensor& t, const std::vector<int64_t>& sizes,
                const std::vector<int64_t>& strides) {
  if (t.dim() != static_cast<int64_t>(sizes.size())) return false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t size = t.size(static_cast<int64_t>(d));
    if (size != sizes[d]) return false;
    if (size > 1 && t.stride(static_cast<int64_t>(d)) != strides[d]) return false;
  }
  return true;
}

Executor::~Executor() = default;

Executor::Step Executor::extern_step(int32_t n) const {
  Step step;
  step.node = n;
  step.call = make_extern_call(traced_.graph, n);
  step.view = view_of(traced_.graph.nodes[n], step.call->op->schema());
  step.may_alias = returns_aliases(step.call->op->schema());
  return step;
}

std::optional<Executor::View> Executor::view_of(const graph::Node& node,
                                                const c10::FunctionSchema& schema) const {
  // A view: every result aliases the first argument and nothing is written. Ops that set the
  // conjugate or negative bit, or reinterpret the dtype, are not plain restrides.
  const graph::Graph& g = traced_.graph;
  if (schema.arguments().empty() || schema.returns().empty() || node.outputs.empty() ||
      node.args.empty()) {
    return std::nullopt;
  }
  const std::string& name = schema.name();
  if (name.find("conj") != std::string::npos || name.find("neg_view") != std::string::npos ||
      name.find("view_as_") != std::string::npos) {
    return std::nullopt;
  }
  // as_strided's storage offset is absolute: not a restride relative to its input's offset,
  // which may differ from call to call.
  if (name == "aten::as_strided") return std::nullopt;
  if (!unannotated_view(schema)) {
    const c10::AliasInfo* self = schema.arguments()[0].alias_info();
    if (self == nullptr || writes(self)) return std::nullopt;
    std::set<c10::Symbol> self_sets;
    add_alias_sets(self, self_sets);
    for (const c10::Argument& r : schema.returns()) {
      std::set<c10::Symbol> sets;
      add_alias_sets(r.alias_info(), sets);
      if (sets.empty() || writes(r.alias_info())) return std::nullopt;
      for (const c10::Symbol& s : sets) {
        if (!self_sets.count(s)) return std::nullopt;
      }
    }
  }
  const auto* in = std::get_if<graph::ValueRef>(&node.args[0]);
  if (in == nullptr) return std::nullopt;
  for (size_t i = 0; i < node.result_slots.size(); ++i) {
    if (node.result_slots[i] != static_cast<int32_t>(i)) return std::nullopt;
  }
  const graph::TensorType& it = g.type(in->id);
  if (!it.is_static()) return std::nullopt;
  View v;
  v.root = in->id;
  v.root_sizes = graph::constant_values(it.sizes);
  v.root_strides = graph::constant_values(it.strides);
  for (graph::ValueId o : node.outputs) {
    const graph::TensorType& ot = g.type(o);
    if (!ot.is_static() || ot.dtype != it.dtype || ot.device != it.device) return std::nullopt;
    v.outputs.push_back(ViewOutput{o, graph::constant_values(ot.sizes),
                                   graph::constant_values(ot.strides),
                                   ot.storage_offset.constant() - it.storage_offset.constant()});
  }
  return v;
}

Executor::Step Executor::view_step(int32_t n, graph::ValueId root) const {
  const graph::Graph& g = traced_.graph;
  const graph::TensorType& rt = g.type(root);
  View v;
  v.root = root;
  v.root_sizes = graph::constant_values(rt.sizes);
  v.root_strides = graph::constant_values(rt.strides);
  v.description =
      "view " + g.op_of(g.nodes[n]).qualified_name() + " (of %" + std::to_string(root) + ")";
  for (graph::ValueId o : g.nodes[n].outputs) {
    const graph::TensorType& t = g.type(o);
    v.outputs.push_back(ViewOutput{o, graph::constant_values(t.sizes),
                                   graph::constant_values(t.strides),
                                   t.storage_offset.constant() - rt.storage_offset.constant()});
  }
  Step step;
  step.view = std::move(v);
  step.may_alias = true;
  return step;
}

codegen::TritonKernel Executor::triton_form(
    const sched::KernelGroup& group, const std::vector<graph::ValueId>& private_outputs) const {
  EMBER_UNSUPPORTED(!group.index_status)
      << "kernel " << group.kernel.name
      << " checks its index tensors before its loops (a scatter kernel: no Triton form yet)";
  // Named by its content: the same kernel in another group, graph or process has the same
  // source, so it is compiled and loaded once (TritonLaunchable::cuda_all, the disk cache).
  loop::Kernel k = group.kernel;
  k.name = "kernel";
  // Buffers are the inputs, then the outputs in order.
  std::vector<std::string> private_buffers;
  for (size_t i = 0; i < group.outputs.size(); ++i) {
    if (std::find(private_outputs.begin(), private_outputs.end(), group.outputs[i]) !=
        private_outputs.end()) {
      private_buffers.push_back(k.buffers[group.inputs.size() + i].name);
    }
  }
  std::string why;
  std::optional<codegen::TritonKernel> t = codegen::emit_triton(k, &why, private_buffers);
  EMBER_UNSUPPORTED(t.has_value())
      << "kernel " << group.kernel.name << " has no Triton form: " << why;
  char name[24];
  std::snprintf(name, sizeof name, "k%016llx",
                static_cast<unsigned long long>(Hasher().str(t->source).digest()));
  k.name = name;
  t = codegen::emit_triton(k, &why, private_buffers);
  EMBER_INTERNAL_ASSERT(t.has_value()) << "a renamed kernel lost its Triton form: " << why;
  return *t;
}

std::vector<at::ScalarType> Executor::buffer_types(const sched::KernelGroup& group) const {
  std::vector<at::ScalarType> types;
  for (graph::ValueId v : group.inputs) {
    types.push_back(tracer::to_c10(traced_.graph.type(v).dtype));
  }
  for (graph::ValueId v : group.outputs) {
    types.push_back(tracer::to_c10(traced_.graph.type(v).dtype));
  }
  return types;
}

Executor::Executor(tracer::TracedGraph traced, ExecutorOptions options)
    : traced_(std::move(traced)) {
  if (options.fold_constants) {
    num_causal_attention_ = causal_attention(traced_);
    num_folded_nodes_ = fold_constants(traced_);
  }
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

  // Kernels: C++ on the CPU; Triton on one CUDA device (or, for tests, in Triton's interpreter).
  const bool cpu = all_on_cpu(g);
  const int cuda_device = cpu ? -1 : one_cuda_device(g);
  const bool triton = (cpu && (options.triton_interpret || triton_interpret_env())) ||
                      (cuda_device >= 0 && triton_enabled() && triton_hooks().compile != nullptr);
  const c10::Device kernel_device = cuda_device >= 0
                                        ? c10::Device(c10::DeviceType::CUDA, cuda_device)
                                        : c10::Device(c10::DeviceType::CPU);
  if (triton && cuda_device >= 0) {
    // Kernels read constants from device memory: scalars the graph holds on the CPU move once.
    for (at::Tensor& c : traced_.constants) {
      if (c.defined() && c.device().is_cpu()) c = c.to(kernel_device);
    }
  }
  sched::ScheduleOptions sopts;
  sopts.fuse = options.codegen && (cpu || triton);
  sopts.reductions = options.reductions;
  sopts.reduction_fusion = options.reduction_fusion;
  sopts.index_asserts = triton;  // a device-side assert per index read, as eager's CUDA kernels
  sopts.combo_kernels = combo_kernels_enabled();
  sched::Plan plan = sched::schedule_graph(g, sopts);
  const char* fa_env = std::getenv("EMBER_FUSE_ATTENTION");
  const std::string fa = fa_env != nullptr ? fa_env : "";
  const bool attention =
      sopts.fuse &&
      (options.fuse_attention == 1 ||
       (options.fuse_attention == -1 && (fa == "1" || (fa != "0" && triton && cuda_device >= 0))));
  if (attention) {
    // Masks computed inside a softmax's kernel must exist in memory for the fused call.
    std::vector<graph::ValueId> masks, siblings;
    find_fused_attention(g, plan, attention_constant(), &masks, &siblings);
    if (!masks.empty() || !siblings.empty()) {
      sopts.realize.assign(g.values.size(), false);
      sopts.no_epilogue.assign(g.values.size(), false);
      for (graph::ValueId m : masks) sopts.realize[m] = true;
      for (graph::ValueId v : siblings) sopts.no_epilogue[v] = true;
      plan = sched::schedule_graph(g, sopts);
      // A mask realized can reveal a sibling (or the reverse): once more.
      masks.clear();
      siblings.clear();
      find_fused_attention(g, plan, attention_constant(), &masks, &siblings);
      for (graph::ValueId m : masks) sopts.realize[m] = true;
      for (graph::ValueId v : siblings) sopts.no_epilogue[v] = true;
      if (!masks.empty() || !siblings.empty()) plan = sched::schedule_graph(g, sopts);
    }
  }
  // A kernel with no Triton form leaves its nodes to ATen: the graph is scheduled again without
  // them, a few times at most, before the whole graph runs unfused.
  constexpr int kMaxRefusalRounds = 8;
  std::vector<std::shared_ptr<TritonLaunchable>> kept_loaded;
  for (int round = 0; !plan.groups.empty(); ++round) {
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
      std::vector<std::shared_ptr<TritonLaunchable>> triton_of_group(plan.groups.size());
      if (triton) {
        // A refused group's nodes become extern for the next round (the last round gives up).
        bool refused = false;
        auto refuse = [&](const sched::KernelGroup& group, const std::string& why) {
          EMBER_UNSUPPORTED(round < kMaxRefusalRounds) << why;
          refused = true;
          if (group.kernel.combo && sopts.combo_kernels) {
            // Its parts get kernels of their own next round, where the one refused is found.
            sopts.combo_kernels = false;
            return;
          }
          refused_kernels_.push_back(why);
          if (sopts.extern_nodes.empty()) sopts.extern_nodes.assign(g.nodes.size(), false);
          for (int32_t n : group.nodes) sopts.extern_nodes[n] = true;
        };
        std::vector<codegen::TritonKernel> forms(plan.groups.size());
        const std::vector<std::vector<graph::ValueId>> private_outputs =
            sched::private_outputs(g, plan);
        for (int gi : live) {
          try {
            forms[gi] = triton_form(plan.groups[gi], private_outputs[gi]);
          } catch (const Unsupported& e) {
            refuse(plan.groups[gi], e.what());
          }
        }
        if (refused) {
          plan = sched::schedule_graph(g, sopts);
          continue;
        }
        if (cuda_device < 0) {
          for (int gi : live) triton_of_group[gi] = TritonLaunchable::interpreted(forms[gi]);
        } else {  // one batch: compiled in parallel, identical kernels once
          std::vector<codegen::TritonKernel> ks;
          std::vector<std::vector<at::ScalarType>> types;
          for (int gi : live) {
            ks.push_back(forms[gi]);
            types.push_back(buffer_types(plan.groups[gi]));
          }
          std::vector<std::string> errors;
          std::vector<std::unique_ptr<TritonLaunchable>> ls =
              TritonLaunchable::cuda_all(ks, types, cuda_device, &errors);
          for (size_t j = 0; j < live.size(); ++j) {
            if (ls[j] != nullptr) {
              triton_of_group[live[j]] = std::move(ls[j]);
              continue;
            }
            const sched::KernelGroup& group = plan.groups[live[j]];
            refuse(group,
                   "Triton's compiler refused kernel " + group.kernel.name + ": " + errors[j]);
          }
          if (refused) {
            // Kept loaded while the graph is scheduled again: the same kernels come back.
            for (auto& l : triton_of_group) {
              if (l) kept_loaded.push_back(std::move(l));
            }
            plan = sched::schedule_graph(g, sopts);
            continue;
          }
        }
      } else {
        std::vector<std::string> sources;
        for (const auto& ks : unit_kernels) sources.push_back(codegen::emit_cpp_unit(ks));
        HostCompileOptions compile_options = HostCompileOptions::from_env();
        compile_options.prelude = codegen::cpp_prelude();
        libraries_ = compile_and_load_all(sources, compile_options);
        kernel_sources_ = sources;
      }
      std::vector<int> kernel_of_group(plan.groups.size(), -1);
      for (int gi : live) {
        const sched::KernelGroup& group = plan.groups[gi];
        Kernel k;
        if (triton) {
          k.triton = triton_of_group[gi];
          kernel_sources_.push_back(k.triton->kernel().source);
        } else {
          k.fn = reinterpret_cast<Kernel::Fn>(
              libraries_[unit_of[gi]]->symbol(codegen::cpp_kernel_symbol(group.kernel.name)));
        }
        k.inputs = group.inputs;
        k.outputs = group.outputs;
        k.index_status = group.index_status;
        k.reuse = group.reuse;
        for (graph::ValueId v : group.inputs) {
          const graph::TensorType& t = g.type(v);
          k.input_layouts.push_back(Kernel::Output{
              graph::constant_values(t.sizes), graph::constant_values(t.strides),
              at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(kernel_device)});
        }
        for (size_t i = 0; i < group.outputs.size(); ++i) {
          const graph::TensorType& t = g.type(group.outputs[i]);
          Kernel::Output out;
          out.sizes = graph::constant_values(t.sizes);
          out.strides = graph::constant_values(t.strides);
          out.options = at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(kernel_device);
          if (triton) {
            const std::vector<std::string>& unused = k.triton->kernel().unused_buffers;
            const std::string& name = group.kernel.buffers[group.inputs.size() + i].name;
            out.unused = std::find(unused.begin(), unused.end(), name) != unused.end();
            num_unwritten_outputs_ += out.unused ? 1 : 0;
          }
          k.allocations.push_back(std::move(out));
        }
        k.description = "kernel " + (triton ? k.triton->kernel().name : group.kernel.name);
        if (group.kernel.combo) {
          k.description += " (combo of " + std::to_string(group.kernel.parts().size()) + ")";
        }
        k.description += ":";
        for (size_t j = 0; j < group.nodes.size(); ++j) {
          k.description += (j ? ", " : " ") + g.op_of(g.nodes[group.nodes[j]]).qualified_name();
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
      if (attention) fuse_attention(plan);
      unfused_ = std::make_unique<Executor>(
          traced_, ExecutorOptions{.codegen = false, .fold_constants = false});
      triton_ = triton;
      if (triton && options.matmul_templates) {
        std::vector<int> group_of_kernel(kernels_.size(), -1);
        for (size_t gi = 0; gi < kernel_of_group.size(); ++gi) {
          if (kernel_of_group[gi] >= 0) group_of_kernel[kernel_of_group[gi]] = static_cast<int>(gi);
        }
        attach_matmul_templates(cuda_device, plan, group_of_kernel);
      }
      break;
    } catch (const Unsupported& e) {
      codegen_error_ = e.what();
      steps_.clear();
      kernels_.clear();
      kernel_sources_.clear();
      num_fused_nodes_ = 0;
      num_unwritten_outputs_ = 0;
      num_fused_attention_ = 0;
      sched::ScheduleOptions unfused;
      unfused.fuse = false;
      plan = sched::schedule_graph(g, unfused);
      break;
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
    std::vector<graph::ValueId> reads = step_reads(step);
    std::vector<graph::ValueId> writes;
    if (step.kernel >= 0) {
      writes = kernels_[step.kernel].outputs;
      if (step.fused) {  // it may compute the product: its operands live until here
        const MatmulOperands& o = step.matmul_operands;
        reads.insert(reads.end(), {o.a, o.b});
        if (o.bias >= 0) reads.push_back(o.bias);
      }
    } else if (!step.call) {
      for (const ViewOutput& o : step.view->outputs) writes.push_back(o.value);
    } else if (step.attention) {
      writes = {step.attention->out};
    } else {
      writes = step.call->outputs;
    }
    for (graph::ValueId v : reads) last_use[v] = static_cast<int>(s);
    for (graph::ValueId v : writes) defined_at[v] = static_cast<int>(s);
  }
  const int keep = static_cast<int>(steps_.size());
  for (graph::ValueId v : g.outputs) last_use[v] = keep;
  for (const graph::Mutation& m : g.mutations) last_use[m.value] = keep;
  release_inputs_ = options.release_inputs && g.mutations.empty();
  if (!release_inputs_) {
    for (const graph::Input& in : g.inputs) last_use[in.value] = keep;
  } else {
    // Constants stay (the executor owns them); non-constant inputs go at their last use.
    for (const graph::Input& in : g.inputs) {
      if (in.kind == graph::InputKind::Constant) last_use[in.value] = keep;
    }
  }
  for (size_t v = 0; v < last_use.size(); ++v) {
    if (last_use[v] < 0) last_use[v] = defined_at[v];  // never read: free where defined
    int at = last_use[v];
    if (at >= 0 && at < keep) steps_[at].release.push_back(static_cast<graph::ValueId>(v));
  }
  if (options.parameter_cache) mark_parameter_kernels();
  plan_reuse(last_use, defined_at);
  plan_mutation_writes(defined_at);
  if (!triton_) plan_memory(last_use);  // the arena is host memory: not for Triton kernels yet

  if (options.cuda_graphs) {
    if (cpu) {
      // CPU graphs have no CUDA graph to replay (torch.compile ignores the mode there too).
    } else if (cuda_device < 0) {
      cuda_graph_note_ = "the graph uses more than one device";
    } else if (!g.mutations.empty()) {
      cuda_graph_note_ = "the graph mutates its inputs";
    } else if (verify_kernels_enabled()) {
      cuda_graph_note_ = "EMBER_VERIFY_KERNELS is set";
    } else if (std::string seeded = first_seeded_op(g); !seeded.empty()) {
      // A replay from C++ does not advance the generator's offset as CUDAGraph.replay() does:
      // every replay would draw the same numbers.
      cuda_graph_note_ = "the graph draws random numbers (" + seeded + ")";
    } else {
      std::vector<bool> parameters;
      for (graph::ValueId v : input_slots_) {
        bool p = false;
        for (const graph::Input& in : g.inputs)
          p |= in.value == v && in.kind == graph::InputKind::Parameter;
        parameters.push_back(p);
      }
      cuda_graph_ = std::make_unique<CudaGraphRunner>(cuda_device, std::move(parameters));
      cuda_graph_note_.clear();
    }
  }
}

std::string Executor::cuda_graph_status() const {
  if (!cuda_graph_) return cuda_graph_note_;
  return cuda_graph_->disabled_reason();
}

bool any_shares_storage(const std::vector<at::Tensor>& inputs, const std::vector<size_t>& which) {
  for (size_t m : which) {
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

bool Executor::mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const {
  return any_shares_storage(inputs, mutated_input_positions_);
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

std::vector<std::string> Executor::describe_steps() const {
  std::vector<std::string> out;
  for (const Step& s : steps_) {
    if (s.kernel >= 0) {
      out.push_back(kernels_[s.kernel].description);
    } else if (s.call) {
      out.push_back(std::string(s.view ? "view " : "extern ") +
                    c10::toString(s.call->op->schema().operator_name()));
    } else {
      out.push_back(s.view->description);
    }
  }
  return out;
}

int Executor::num_view_steps() const {
  return static_cast<int>(std::count_if(steps_.begin(), steps_.end(),
                                        [](const Step& s) { return s.view.has_value(); }));
}

std::vector<graph::ValueId> Executor::step_reads(const Step& step) const {
  if (step.kernel >= 0) return kernels_[step.kernel].inputs;
  if (!step.call) return {step.view->root};
  if (step.attention) {
    const FusedAttention& a = *step.attention;
    std::vector<graph::ValueId> reads = {a.q, a.kt, a.v};
    if (a.mask >= 0) reads.push_back(a.mask);
    return reads;
  }
  return step.call->reads();
}

int Executor::num_kernels() const {
  int n = 0;
  for (const Step& s : steps_) n += s.kernel >= 0 ? 1 : 0;
  return n;
}

std::function<std::optional<double>(graph::ValueId)> Executor::attention_constant() const {
  return [this](graph::ValueId v) -> std::optional<double> {
    for (const auto& [value, index] : constant_slots_) {
      const at::Tensor& c = traced_.constants[index];
      if (value == v && c.defined() && c.numel() == 1 && c.is_floating_point()) {
        return c.item<double>();
      }
    }
    return std::nullopt;
  };
}

void Executor::fuse_attention(const sched::Plan& plan) {
  std::vector<FusedAttention> found =
      find_fused_attention(traced_.graph, plan, attention_constant());
  if (found.empty()) return;
  std::vector<bool> drop(steps_.size(), false);
  for (FusedAttention& f : found) {
    drop[f.first_product_step] = drop[f.softmax_step] = true;
    if (f.view_step >= 0) drop[f.view_step] = true;
    steps_[f.second_product_step].attention = std::move(f);
  }
  std::vector<Step> kept;
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (!drop[s]) kept.push_back(std::move(steps_[s]));
  }
  steps_ = std::move(kept);
  num_fused_attention_ = static_cast<int>(found.size());
}

int Executor::num_extern_steps() const {
  return static_cast<int>(std::count_if(steps_.begin(), steps_.end(), [](const Step& s) {
    return s.call.has_value() && !s.view.has_value();
  }));
}

bool Executor::run_view(const Step& step, std::vector<at::Tensor>& env) const {
  const View& v = *step.view;
  at::Tensor base = env[v.root];
  if (!base.defined() || !base.has_storage() || base.layout() != at::kStrided || base.is_conj() ||
      base.is_neg() || base.key_set().has(c10::DispatchKey::Python)) {
    if (step.call) return false;
    EMBER_INTERNAL_ASSERT(false) << "a view step's root " << v.root << " is not a plain tensor";
  }
  if (!has_layout(base, v.root_sizes, v.root_strides)) {
    // An extern op returned another layout than its meta kernel promised. A view op runs as the
    // dispatcher call; a collapsed chain views a copy in the traced layout (it then aliases the
    // copy, not the extern's result: both are intermediates).
    if (step.call) return false;
    at::Tensor copy = at::empty_strided(v.root_sizes, v.root_strides, base.options());
    copy.copy_(base);
    base = copy;
  }
  for (const ViewOutput& o : v.outputs) {
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(), base.dtype());
    impl->set_sizes_and_strides(o.sizes, o.strides, base.storage_offset() + o.offset_delta);
    impl->set_version_counter(base.unsafeGetTensorImpl()->version_counter());
    env[o.value] = at::Tensor(std::move(impl));
  }
  return true;
}

bool Executor::run_kernel(const Kernel& k, std::vector<at::Tensor>& env, const at::Tensor& arena,
                          bool write_through) const {
  std::vector<void*> buffers;
  buffers.reserve(k.inputs.size() + k.outputs.size() + 1);
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    at::Tensor& x = env[k.inputs[i]];
    EMBER_INTERNAL_ASSERT(x.defined())
        << k.description << ": input " << i << " (%" << k.inputs[i] << ") is not defined";
    const Kernel::Output& want = k.input_layouts[i];
    if (!has_layout(x, want.sizes, want.strides) || x.dtype() != want.options.dtype() ||
        x.device() != want.options.device()) {
      // An extern op returned another layout or dtype than its meta kernel promised (bf16
      // _native_batch_norm_legit_functional: f32 statistics traced, bf16 returned): copy it into
      // the traced ones, which the kernel's index math and element type assume.
      at::Tensor copy = at::empty_strided(want.sizes, want.strides, want.options);
      copy.copy_(x);
      x = copy;
    }
    buffers.push_back(x.data_ptr());
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const Kernel::Output& out = k.allocations[i];
    at::Tensor& t = env[k.outputs[i]];
    if (out.unused) {
      // Nothing reads it and the kernel does not write it: an empty stand-in (its pointer is
      // never dereferenced).
      t = at::empty({0}, out.options);
      buffers.push_back(t.data_ptr());
      continue;
    }
    if (out.reuse_input >= 0) {
      // The input is dead after this kernel: when nothing else holds its memory, write there.
      // A mutated graph input (write_through) is the caller's: written when no other input
      // shares its storage (Note [Mutations written in place]).
      const at::Tensor& x = env[k.inputs[out.reuse_input]];
      const bool free =
          out.write_through ? write_through : x.use_count() == 1 && x.storage().use_count() == 1;
      if (free && x.dtype() == out.options.dtype() && has_layout(x, out.sizes, out.strides)) {
        t = x;
        buffers.push_back(t.data_ptr());
        continue;
      }
    }
    if (out.arena_offset >= 0) {
      const int64_t itemsize = static_cast<int64_t>(out.options.dtype().itemsize());
      auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(arena.storage()),
                                                       arena.key_set(), out.options.dtype());
      impl->set_sizes_and_strides(out.sizes, out.strides, out.arena_offset / itemsize);
      t = at::Tensor(std::move(impl));
    } else {
      t = at::empty_strided(out.sizes, out.strides, out.options);
    }
    buffers.push_back(t.data_ptr());
  }
  if (k.triton) {
    std::vector<at::Tensor> args;
    args.reserve(k.inputs.size() + k.outputs.size());
    for (graph::ValueId v : k.inputs) args.push_back(env[v]);
    for (graph::ValueId v : k.outputs) args.push_back(env[v]);
    k.triton->launch(args);
    return true;
  }
  bool index_out_of_range = false;
  if (k.index_status) buffers.push_back(&index_out_of_range);
  k.fn(buffers.data(), nullptr);
  return !index_out_of_range;
}

std::vector<at::Tensor> Executor::run(const std::vector<at::Tensor>& inputs) const {
  // The graph was traced under the caller's autocast state: its casts are nodes already, and an
  // op traced in a region with autocast off (a rotary embedding's fp32 matmul) must not be cast
  // again because the caller's autocast is on now.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  check_inputs(inputs);
  if (cuda_graph_) {
    auto replayed = cuda_graph_->run(
        inputs, [this](const std::vector<at::Tensor>& in) { return run_program(in); });
    if (replayed.has_value()) return std::move(*replayed);
  }
  return run_program(inputs);
}

std::vector<at::Tensor> Executor::run(std::vector<at::Tensor>&& inputs) const {
  if (!release_inputs_ || cuda_graph_) {
    const std::vector<at::Tensor> kept = std::move(inputs);
    return run(kept);
  }
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  check_inputs(inputs);
  return run_program(inputs, &inputs);
}

void Executor::check_inputs(const std::vector<at::Tensor>& inputs) const {
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
}

namespace {

// EMBER_DEBUG_LIVE=1: the bytes of the distinct storages a run's values hold before each step,
// and the most, printed to stderr at the run's end with the steps around the peak (every step
// with EMBER_DEBUG_LIVE=2). For finding
// what a program keeps alive (scripts/profile_model.py --mode training shows the peaks).
struct LiveBytes {
  const std::vector<at::Tensor>& env;
  bool on = false;
  bool all = false;  // EMBER_DEBUG_LIVE=2: every step
  int64_t peak = 0;
  int peak_step = -1;
  std::vector<int64_t> before;
  explicit LiveBytes(const std::vector<at::Tensor>& e) : env(e) {
    const char* v = std::getenv("EMBER_DEBUG_LIVE");
    on = v != nullptr && (std::string_view(v) == "1" || std::string_view(v) == "2");
    all = on && std::string_view(v) == "2";
  }
  void note(int step) {
    if (!on) return;
    std::unordered_set<const void*> seen;
    int64_t bytes = 0;
    for (const at::Tensor& t : env) {
      if (!t.defined() || !t.has_storage()) continue;
      const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
      if (seen.insert(s).second) bytes += static_cast<int64_t>(s->nbytes());
    }
    before.push_back(bytes);
    if (bytes > peak) peak = bytes, peak_step = step;
  }
  void report(const Executor& e) const {
    if (!on || before.empty()) return;
    std::vector<std::string> steps = e.describe_steps();
    std::ostringstream os;
    os << "ember live bytes: " << steps.size() << " steps, at start " << before.front() / (1 << 20)
       << " MiB, peak " << peak / (1 << 20) << " MiB before step " << peak_step << ", at end "
       << before.back() / (1 << 20) << " MiB\n";
    const int from = all ? 0 : std::max(0, peak_step - 3);
    const int to = all ? static_cast<int>(steps.size()) : peak_step + 2;
    for (int i = from; i < std::min<int>(static_cast<int>(steps.size()), to); ++i) {
      os << "  " << i << ": " << before[i] / (1 << 20) << " MiB  " << steps[i] << "\n";
    }
    std::cerr << os.str();
  }
};

}  // namespace

std::vector<at::Tensor> Executor::run_program(const std::vector<at::Tensor>& inputs,
                                              std::vector<at::Tensor>* owned) const {
  const graph::Graph& g = traced_.graph;
  if (unfused_ && !strides_match(inputs)) {
    unfused_runs_.fetch_add(1, std::memory_order_relaxed);
    return unfused_->run(inputs);
  }
  std::vector<at::Tensor> reference;
  if (verify_kernels_enabled() && unfused_ && !kernels_.empty()) {
    reference = unfused_->reference_values(inputs);
  }

  std::vector<at::Tensor> env(g.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    env[input_slots_[i]] = owned != nullptr ? std::move((*owned)[i]) : inputs[i];
  }
  // From here on `inputs` may have been moved from (owned): read the program's values instead.
  bool inputs_gone = owned != nullptr;
  // Note [Mutations written in place]: only when no two inputs share a storage this call.
  const bool write_through = num_written_through_ > 0 && inputs_own_their_storage(env);
  for (const auto& [value, index] : constant_slots_) env[value] = traced_.constants[index];

  torch::jit::Stack stack;
  // The arena holds intermediates only (no output, mutation value or alias of one is placed in
  // it, and extern results that alias it are cloned), so nothing references it after the call
  // and the next call may take it over.
  at::Tensor arena;
  if (arena_bytes_ > 0) {
    {
      std::lock_guard<std::mutex> lock(arena_mu_);
      if (!free_arenas_.empty()) {
        arena = std::move(free_arenas_.back());
        free_arenas_.pop_back();
      }
    }
    if (!arena.defined()) arena = at::empty({arena_bytes_}, at::TensorOptions().dtype(at::kByte));
  }
  struct ArenaReturn {
    const Executor& e;
    at::Tensor& arena;
    ~ArenaReturn() {
      if (!arena.defined()) return;
      std::lock_guard<std::mutex> lock(e.arena_mu_);
      e.free_arenas_.push_back(std::move(arena));
    }
  } give_back{*this, arena};
  LiveBytes live(env);
  for (const Step& step : steps_) {
    live.note(steps_.empty() ? 0 : static_cast<int>(&step - steps_.data()));
    if (step.fused_into >= 0 && steps_[step.fused_into].fused->chosen() >= 0) {
      // The product runs inside its epilogue's step (or, if that cannot, there).
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
    if (step.kernel >= 0) {
      if (!reference.empty()) check_kernel(kernels_[step.kernel], reference);
      if (step.fused && run_fused_step(step, env)) {
        for (graph::ValueId v : step.release) env[v].reset();
        continue;
      }
      const Kernel& kernel = kernels_[step.kernel];
      std::optional<std::vector<ParameterCache::Input>> key;
      if (kernel.parameter_cache && !cuda_graph_) {
        key = ParameterCache::key_of(env, kernel.inputs);
        std::lock_guard<std::mutex> lock(kernel.parameter_cache->mu);
        if (kernel.parameter_cache->key == *key) {
          for (size_t i = 0; i < kernel.outputs.size(); ++i) {
            env[kernel.outputs[i]] = kernel.parameter_cache->outputs[i];
          }
          for (graph::ValueId v : step.release) env[v].reset();
          continue;
        }
      }
      if (step.fused && !env[step.matmul_operands.out].defined()) {
        steps_[step.fused_product_step].call->run(env, stack);  // the product's step was skipped
      }
      if (!run_kernel(kernels_[step.kernel], env, arena, write_through)) {
        // An index tensor holds an out-of-range index. Nothing is mutated before the last step:
        // the unfused program runs the ATen ops, which raise eager's error.
        EMBER_INTERNAL_ASSERT(unfused_ != nullptr) << "kernel step without an unfused program";
        EMBER_CHECK(!inputs_gone) << "an index is out of range in a kernel of the graph's "
                                  << "backward (ember frees its inputs as it goes, so the ATen "
                                  << "ops that would name it cannot run again)";
        return unfused_->run(inputs);
      }
      if (step.fused && step.fused->chosen() == -2) decide_fused_step(step, env, stack);
      if (key) {
        std::lock_guard<std::mutex> lock(kernel.parameter_cache->mu);
        kernel.parameter_cache->key = std::move(*key);
        kernel.parameter_cache->held.clear();
        for (graph::ValueId v : kernel.inputs) {
          kernel.parameter_cache->held.push_back(env[v].storage());
        }
        kernel.parameter_cache->outputs.clear();
        for (graph::ValueId o : kernel.outputs) kernel.parameter_cache->outputs.push_back(env[o]);
      }
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
    if (step.attention) {
      env[step.attention->out] = step.attention->run(env);
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
    std::optional<at::Tensor> product;
    if (step.matmul) {
      const MatmulOperands& o = step.matmul_operands;
      product = step.matmul->run(env[o.a], env[o.b], o.bias >= 0 ? &env[o.bias] : nullptr,
                                 step.matmul_sizes, step.matmul_strides, [&] {
                                   step.call->run(env, stack);
                                   return env[step.matmul_operands.out];
                                 });
    }
    if (product.has_value()) {
      env[step.matmul_operands.out] = std::move(*product);
    } else if (step.view && run_view(step, env)) {
      // made from the root's storage
    } else {
      step.call->run(env, stack);
      if (arena.defined() && !step.may_alias) {
        // The plan assumed this op's results are fresh memory (its schema says so). One that
        // returns a view of an arena buffer anyway would be overwritten when the buffer is
        // reused: give it its own copy.
        for (graph::ValueId o : step.call->outputs) {
          at::Tensor& t = env[o];
          if (t.defined() && t.has_storage() &&
              t.storage().unsafeGetStorageImpl() == arena.storage().unsafeGetStorageImpl()) {
            t = t.clone();
          }
        }
      }
    }
    for (graph::ValueId v : step.release) env[v].reset();
  }
  live.note(static_cast<int>(steps_.size()));
  live.report(*this);
  if (!g.mutations.empty()) {
    at::NoGradGuard no_grad;  // as eager updates BatchNorm's running statistics
    for (const graph::Mutation& m : g.mutations) {
      at::Tensor& target = env[m.input];
      const at::Tensor& value = env[m.value];
      if (value.unsafeGetTensorImpl() == target.unsafeGetTensorImpl()) {
        // Written in place by its kernel (Note [Mutations written in place]): what copy_ would
        // have told autograd.
        if (!target.is_inference()) target.unsafeGetTensorImpl()->bump_version();
        continue;
      }
      target.copy_(value);
    }
  }
  std::vector<at::Tensor> outs;
  outs.reserve(g.outputs.size());
  for (graph::ValueId v : g.outputs) outs.push_back(env[v]);
  return outs;
}

}  // namespace ember::runtime
