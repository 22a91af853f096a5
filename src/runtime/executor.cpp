/// \file
/// Building the executor, once per graph: the constructor folds constants, schedules the graph,
/// compiles its kernels (C++, or Triton in rounds around the kernels Triton refuses) and turns
/// the plan into the program of steps (extern calls, views, kernels, fused attention), with each
/// value's release point and the CUDA-graph decision; and what describes that program. Running it
/// per call is executor_run.cpp.
#include "runtime/executor.h"

#include <ATen/Context.h>
#include <ATen/core/List.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/cpp/cpp_emitter.h"
#include "runtime/causal_attention.h"
#include "runtime/constant_fold.h"
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

codegen::TritonKernel Executor::triton_form(const sched::KernelGroup& group,
                                            const std::vector<graph::ValueId>& private_outputs,
                                            const CompileOptions::Triton& options) const {
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
  std::optional<codegen::TritonKernel> t = codegen::emit_triton(k, &why, private_buffers, options);
  EMBER_UNSUPPORTED(t.has_value())
      << "kernel " << group.kernel.name << " has no Triton form: " << why;
  char name[24];
  std::snprintf(name, sizeof name, "k%016llx",
                static_cast<unsigned long long>(Hasher().str(t->source).digest()));
  k.name = name;
  t = codegen::emit_triton(k, &why, private_buffers, options);
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

Executor::Executor(tracer::TracedGraph traced, ExecutorOptions executor_options)
    : traced_(std::move(traced)), options_(std::move(executor_options.compile)) {
  const CompileOptions& options = options_;
  if (options.runtime.fold_constants) {
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
  const bool triton =
      (cpu && options.triton.interpret) ||
      (cuda_device >= 0 && options.triton.enabled && triton_hooks().compile != nullptr);
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
  sopts.fuse = options.sched.codegen && (cpu || triton);
  sopts.reductions = options.sched.reductions;
  sopts.reduction_fusion = options.sched.reduction_fusion;
  sopts.stored_prologues = options.sched.stored_prologues;
  sopts.index_asserts = triton;  // a device-side assert per index read, as eager's CUDA kernels
  sopts.chunk_single_rows = !triton;
  sopts.combo_kernels = options.sched.combo_kernels;
  sched::Plan plan = sched::schedule_graph(g, sopts);
  const int fa = options.runtime.fuse_attention;
  const bool attention = sopts.fuse && (fa == 1 || (fa == -1 && triton && cuda_device >= 0));
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
            forms[gi] = triton_form(plan.groups[gi], private_outputs[gi], options.triton);
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
              TritonLaunchable::cuda_all(ks, types, cuda_device, &errors, options.triton.autotune);
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
        HostCompileOptions compile_options = HostCompileOptions::from(options.codegen);
        compile_options.prelude = codegen::cpp_prelude();
        compile_options.key_parts.push_back("torch " EMBER_TORCH_VERSION_STRING);
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
        {
          // Its buffers' bytes, each read or written once: a lower bound on its memory traffic
          // (scripts/profile_model.py sets it beside the kernel's time).
          int64_t bytes = 0;
          for (const std::vector<graph::ValueId>* vs : {&group.inputs, &group.outputs}) {
            for (graph::ValueId v : *vs) bytes += graph::nbytes(g.type(v));
          }
          std::ostringstream mib;
          mib << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1 << 20);
          k.description += " [" + mib.str() + " MiB]";
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
      ExecutorOptions unfused_options{.compile = options};
      unfused_options.compile.sched.codegen = false;
      unfused_options.compile.runtime.fold_constants = false;
      unfused_ = std::make_unique<Executor>(traced_, std::move(unfused_options));
      triton_ = triton;
      if (triton && options.runtime.matmul_templates) {
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
  release_inputs_ = executor_options.release_inputs && g.mutations.empty();
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
  if (options.runtime.parameter_cache) mark_parameter_kernels();
  plan_reuse(last_use, defined_at);
  plan_mutation_writes(defined_at);
  if (!triton_) plan_memory(last_use);  // the arena is host memory: not for Triton kernels yet

  if (options.runtime.cuda_graphs) {
    if (cpu) {
      // CPU graphs have no CUDA graph to replay (torch.compile ignores the mode there too).
    } else if (cuda_device < 0) {
      cuda_graph_note_ = "the graph uses more than one device";
    } else if (!g.mutations.empty()) {
      cuda_graph_note_ = "the graph mutates its inputs";
    } else if (options.debug.verify_kernels) {
      cuda_graph_note_ = "verify_kernels is on";
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

}  // namespace ember::runtime
