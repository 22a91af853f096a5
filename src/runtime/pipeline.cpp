/// \file
/// The pipeline (pipeline.h): compile_graph's steps, each a free function, and the hook that
/// follows each one.
#include "runtime/pipeline.h"

#include <ATen/Context.h>
#include <ATen/core/List.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/cpp/cpp_emitter.h"
#include "graph/ops.h"
#include "graph/pinned_symbols.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "runtime/attention_fusion.h"
#include "runtime/bias_apart.h"
#include "runtime/causal_attention.h"
#include "runtime/collectives.h"
#include "runtime/constant_fold.h"
#include "runtime/executor.h"
#include "runtime/plan_cache.h"
#include "sched/memory_plan.h"
#include "support/error.h"
#include "support/hash.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

// "fused_<ops>": what a kernel computes, for its profiler range (ember::k3_fused_native_layer_norm
// _gelu): the distinct ops of its nodes in graph order, views left out, the first four named and
// the number of others after them.
std::string fused_label(const graph::Graph& g, const sched::KernelGroup& group) {
  std::vector<std::string> ops;
  for (int32_t n : group.nodes) {
    const graph::OpInfo& op = g.ops[static_cast<size_t>(g.nodes[static_cast<size_t>(n)].op)];
    if (graph::is_view_op(op.kind)) continue;
    std::string name =
        op.name.substr(op.name.find("::") == std::string::npos ? 0 : op.name.find("::") + 2);
    // An identifier's characters only: it also names a Triton function.
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    if (std::find(ops.begin(), ops.end(), name) == ops.end()) ops.push_back(std::move(name));
  }
  std::string out = "fused";
  for (size_t i = 0; i < ops.size() && i < 4; ++i) out += "_" + ops[i];
  if (ops.size() > 4) out += "_and_" + std::to_string(ops.size() - 4) + "_more";
  return out;
}

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
  return tracer::op_kind(schema) == graph::OpKind::_unsafe_view;
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

/// The CUDA device index every value of `g` that is not on the CPU is on, or -1 (values on
/// another kind of device, on several CUDA devices, or none on CUDA). CPU values do not count:
/// host_nodes() leaves what reads or writes them to ATen.
int one_cuda_device(const graph::Graph& g) {
  int index = -2;
  for (const graph::Value& v : g.values) {
    if (v.type.device.kind == graph::DeviceKind::CPU) continue;
    if (v.type.device.kind != graph::DeviceKind::CUDA) return -1;
    int i = std::max<int>(v.type.device.index, 0);
    if (index != -2 && index != i) return -1;
    index = i;
  }
  return index < 0 ? -1 : index;
}

bool is_dropout(graph::OpKind k) {
  using graph::OpKind;
  return k == OpKind::dropout || k == OpKind::native_dropout || k == OpKind::feature_dropout ||
         k == OpKind::alpha_dropout || k == OpKind::feature_alpha_dropout ||
         k == OpKind::_fused_dropout;
}

/// Whether node `n`, of an op tagged nondeterministic_seeded, draws random numbers: not when its
/// dropout probability is a constant 0 (the attention kernels' `dropout_p`) or it is a dropout
/// with `train` false.
bool draws_random_numbers(const graph::Node& n, const c10::FunctionSchema& schema) {
  const auto& params = schema.arguments();
  for (size_t i = 0; i < params.size() && i < n.args.size(); ++i) {
    const std::string& name = params[i].name();
    if (name == "dropout_p" || (name == "p" && is_dropout(tracer::op_kind(schema)))) {
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

std::optional<View> view_of(const Program& p, const graph::Node& node,
                            const c10::FunctionSchema& schema);

/// `outputs` as views of `root` at their traced geometry: constants for static types, else
/// expressions that the executor evaluates per call (View::symbolic).
View view_geometry(const graph::Graph& g, graph::ValueId root,
                   const std::vector<graph::ValueId>& outputs) {
  const graph::TensorType& rt = g.type(root);
  View v;
  v.root = root;
  v.symbolic = !rt.is_static();
  for (graph::ValueId o : outputs) v.symbolic |= !g.type(o).is_static();
  if (v.symbolic) {
    v.symbolic_root_sizes = rt.sizes;
    v.symbolic_root_strides = rt.strides;
  } else {
    v.root_sizes = graph::constant_values(rt.sizes);
    v.root_strides = graph::constant_values(rt.strides);
  }
  for (graph::ValueId o : outputs) {
    const graph::TensorType& t = g.type(o);
    ViewOutput out;
    out.value = o;
    if (v.symbolic) {
      out.symbolic_sizes = t.sizes;
      out.symbolic_strides = t.strides;
      out.symbolic_offset_delta = t.storage_offset - rt.storage_offset;
    } else {
      out.sizes = graph::constant_values(t.sizes);
      out.strides = graph::constant_values(t.strides);
      out.offset_delta = t.storage_offset.constant() - rt.storage_offset.constant();
    }
    v.outputs.push_back(std::move(out));
  }
  return v;
}

Step extern_step(const Program& p, int32_t n) {
  Step step;
  step.node = n;
  step.call = make_extern_call(p.traced.graph, n);
  step.view = view_of(p, p.traced.graph.nodes[n], step.call->op->schema());
  step.may_alias = returns_aliases(step.call->op->schema());
  return step;
}

std::optional<View> view_of(const Program& p, const graph::Node& node,
                            const c10::FunctionSchema& schema) {
  // A view: every result aliases the first argument and nothing is written. Ops that set the
  // conjugate or negative bit, or reinterpret the dtype, are not plain restrides.
  const graph::Graph& g = p.traced.graph;
  if (schema.arguments().empty() || schema.returns().empty() || node.outputs.empty() ||
      node.args.empty()) {
    return std::nullopt;
  }
  switch (tracer::op_kind(schema)) {
    case graph::OpKind::conj:
    case graph::OpKind::_conj:
    case graph::OpKind::resolve_conj:
    case graph::OpKind::_neg_view:
    case graph::OpKind::resolve_neg:
    case graph::OpKind::view_as_real:
    case graph::OpKind::view_as_complex:
    // as_strided's storage offset is absolute: not a restride relative to its input's offset,
    // which may differ from call to call.
    case graph::OpKind::as_strided:
      return std::nullopt;
    default:
      break;
  }
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
  for (graph::ValueId o : node.outputs) {
    const graph::TensorType& ot = g.type(o);
    if (ot.dtype != it.dtype || ot.device != it.device) return std::nullopt;
  }
  return view_geometry(g, in->id, node.outputs);
}

Step view_step(const Program& p, int32_t n, graph::ValueId root) {
  const graph::Graph& g = p.traced.graph;
  View v = view_geometry(g, root, g.nodes[n].outputs);
  v.description =
      "view " + g.op_of(g.nodes[n]).qualified_name() + " (of %" + std::to_string(root) + ")";
  Step step;
  step.view = std::move(v);
  step.may_alias = true;
  return step;
}

// `label` (fused_label) ends the kernel's name: the device timeline of torch.profiler and nsys
// shows ember_k<hash>_fused_<ops>, as Inductor's kernel names say what they fuse.
codegen::TritonKernel triton_form(const sched::KernelGroup& group,
                                  const std::vector<graph::ValueId>& private_outputs,
                                  const CompileOptions::Triton& options, const std::string& label) {
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
  k.name = std::string(name) + "_" + label;
  t = codegen::emit_triton(k, &why, private_buffers, options);
  EMBER_INTERNAL_ASSERT(t.has_value()) << "a renamed kernel lost its Triton form: " << why;
  return *t;
}

/// The hook after each step: its time; after a graph pass that changed the graph (its count of
/// rewritten nodes is not 0), the verifier and, with CompileOptions::Debug::dump_pipeline, the
/// graph on stderr. Only the graph passes change the graph, so no other step is checked.
class StepHook {
 public:
  explicit StepHook(Program& p) : p_(p) {}

  template <typename Step>
  void operator()(const char* name, Step&& step) {
    const auto start = std::chrono::steady_clock::now();
    step();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    p_.step_seconds.emplace_back(name, took.count());
  }

  /// A graph pass: `pass` returns how many nodes it rewrote.
  template <typename Pass>
  int graph_pass(const char* name, Pass&& pass) {
    int changed = 0;
    (*this)(name, [&] { changed = pass(); });
    if (changed == 0) return 0;
    const std::vector<std::string> broken = graph::verify_graph(p_.traced.graph);
    EMBER_INTERNAL_ASSERT(broken.empty())
        << "pipeline step " << name << " left an invalid graph: " << broken.front();
    if (p_.options.debug.dump_pipeline) {
      std::cerr << "ember: pipeline step " << name << " changed the graph:\n"
                << graph::print_graph(p_.traced.graph);
    }
    return changed;
  }

 private:
  Program& p_;
};

}  // namespace

std::vector<at::ScalarType> buffer_types(const Program& p, const sched::KernelGroup& group) {
  std::vector<at::ScalarType> types;
  for (graph::ValueId v : group.inputs) {
    types.push_back(tracer::to_c10(p.traced.graph.type(v).dtype));
  }
  for (graph::ValueId v : group.outputs) {
    types.push_back(tracer::to_c10(p.traced.graph.type(v).dtype));
  }
  return types;
}

namespace {

/// Symbolic graph `traced` as a program that compiles it per binding of its symbols
/// (runtime/specialize.h), `why` being the reason no symbolic program was made.
Program specialized_program(tracer::TracedGraph traced, const ExecutorOptions& options,
                            std::string why) {
  Program p;
  p.traced = std::move(traced);
  p.options = options.compile;
  p.symbols_from_caller = options.symbols_from_caller;
  bind_inputs(p);
  p.symbol_sources = symbol_sources(p.traced.graph, p.input_slots, options.symbols_from_caller);
  p.specializations = std::make_shared<Specializations>(p.traced, options);
  p.symbolic_fallback = std::move(why);
  return p;
}

Program compile_program(tracer::TracedGraph traced, const ExecutorOptions& options);

}  // namespace

Program compile_graph(tracer::TracedGraph traced, const ExecutorOptions& options) {
  if (traced.graph.symbols.symbols().empty()) return compile_program(std::move(traced), options);
  tracer::TracedGraph copy = traced;
  try {
    return compile_program(std::move(traced), options);
  } catch (const Unsupported& e) {
    return specialized_program(std::move(copy), options,
                               std::string("compiled per size: ") + e.what());
  }
}

namespace {

// A graph over shape symbols (issue 35) goes through the same steps, each handling symbols or
// throwing Unsupported naming itself (compile_graph then compiles the graph per size). Its
// fold_constants pass is skipped: it runs nodes at the trace's sizes (causal_attention proves
// masks over symbols instead of evaluating them; fuse_attention matches shapes as expressions).
Program compile_program(tracer::TracedGraph traced, const ExecutorOptions& options) {
  Program p;
  p.traced = std::move(traced);
  p.options = options.compile;
  p.symbols_from_caller = options.symbols_from_caller;
  const bool symbolic = !p.traced.graph.symbols.symbols().empty();
  StepHook step(p);
  if (p.options.runtime.fold_constants) {
    // (Over symbols, a mask is proved causal rather than evaluated: causal_attention.h.)
    p.num_causal_attention =
        step.graph_pass("causal_attention", [&] { return causal_attention(p.traced); });
    if (!symbolic) {
      p.num_folded_nodes =
          step.graph_pass("fold_constants", [&] { return fold_constants(p.traced); });
    }
  }
  Target target;
  step("choose_target", [&] { target = choose_target(p); });
  if (fuses_attention(p.options, target)) {  // (symbolic heads: evaluated per call)
    p.num_fused_attention =
        step.graph_pass("fuse_attention", [&] { return fuse_attention(p.traced); });
  }
  if (p.options.runtime.bias_apart && target.triton) {
    p.num_bias_apart = step.graph_pass("bias_apart", [&] { return bias_apart(p.traced); });
  }
  step.graph_pass("hoist_collectives", [&] { return hoist_collectives(p.traced); });
  step.graph_pass("sink_collective_waits", [&] { return sink_collective_waits(p.traced); });
  step("bind_inputs", [&] {
    bind_inputs(p);
    if (symbolic) {
      p.symbol_sources = symbol_sources(p.traced.graph, p.input_slots, options.symbols_from_caller);
      // Kernels then read `f32[s0, 32]`, not `f32[s0, s2]` with s2 pinned to 32.
      graph::fold_pinned_inputs(p.traced.graph);
    }
  });
  sched::ScheduleOptions schedule_options;
  sched::Plan plan;
  step("schedule", [&] { plan = schedule(p, target, &schedule_options); });
  p.phase_seconds = plan.phase_seconds;
  step("generate_kernels", [&] { generate_kernels(p, target, plan, schedule_options); });
  Lifetimes life;
  step("plan_lifetimes", [&] { life = plan_lifetimes(p, options.release_inputs); });
  step("plan_memory", [&] {
    if (p.options.runtime.parameter_cache) mark_parameter_kernels(p);
    plan_reuse(p, life);
    plan_mutation_writes(p, life);
    plan_memory(p, life);
  });
  step("decide_cuda_graphs", [&] { decide_cuda_graphs(p, target); });
  // Calls whose input strides differ from the types' run a static program of their sizes.
  if (symbolic) p.specializations = std::make_shared<Specializations>(p.traced, options);
  return p;
}

}  // namespace

void bind_inputs(Program& p) {
  const graph::Graph& g = p.traced.graph;
  int constant_index = 0;
  for (const graph::Input& in : g.inputs) {
    if (in.kind == graph::InputKind::Constant) {
      p.constant_slots.emplace_back(in.value, constant_index++);
    } else {
      p.input_slots.push_back(in.value);
    }
  }
  EMBER_INTERNAL_ASSERT(constant_index == static_cast<int>(p.traced.constants.size()))
      << "graph has " << constant_index << " constant inputs but " << p.traced.constants.size()
      << " constants";
  for (const graph::Mutation& m : g.mutations) {
    for (size_t i = 0; i < p.input_slots.size(); ++i) {
      if (p.input_slots[i] == m.input) p.mutated_input_positions.push_back(i);
    }
  }
}

namespace {

// A CUDA graph captured at the second call would keep the defaults of kernels whose candidates
// are still compiling (Note [Candidates compiled in the background]).
TritonTuning triton_tuning(const CompileOptions& o) {
  if (!o.triton.autotune) return TritonTuning::Off;
  return o.triton.background_tuning && !o.runtime.cuda_graphs ? TritonTuning::Background
                                                              : TritonTuning::FirstLaunch;
}

}  // namespace

bool fuses_attention(const CompileOptions& o, const Target& t) {
  const int fa = o.runtime.fuse_attention;
  const bool kernels = o.sched.codegen && (t.cpu || t.triton);
  const bool by_default = t.triton && t.cuda_device >= 0;
  return kernels && (fa == 1 || (fa == -1 && by_default));
}

std::vector<bool> host_nodes(const graph::Graph& g, std::vector<bool>* kept_on_cpu,
                             bool constants_on_device) {
  const size_t nv = g.values.size();
  // CPU scalars a kernel may read once on the device: the graph's 0-dim CPU inputs (constants
  // the pipeline moves; inputs as before). Any other CPU value is the host's.
  std::vector<bool> movable(nv, false);
  std::vector<bool> device_constant(nv, false);
  for (const graph::Input& in : g.inputs) {
    const graph::TensorType& t = g.values[in.value].type;
    movable[in.value] = t.device.kind == graph::DeviceKind::CPU && t.dim() == 0;
    device_constant[in.value] = constants_on_device && in.kind == graph::InputKind::Constant;
  }
  auto cpu = [&](graph::ValueId v) {
    return g.values[v].type.device.kind == graph::DeviceKind::CPU && !device_constant[v];
  };
  std::vector<bool> host(g.nodes.size(), false);
  bool any = false;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (graph::ValueId v : graph::tensor_reads(g.nodes[n]))
      host[n] = host[n] || (cpu(v) && !movable[v]);
    for (graph::ValueId v : g.nodes[n].outputs) host[n] = host[n] || cpu(v);
    any = any || host[n];
  }
  if (kept_on_cpu != nullptr) kept_on_cpu->assign(nv, false);
  if (!any) return {};
  // A CPU scalar that a host node reads stays on the CPU (ATen on the CPU cannot read device
  // memory), and so every node reading it is a host node too: to a fixed point.
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<bool> kept(nv, false);
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (!host[n]) continue;
      for (graph::ValueId v : graph::tensor_reads(g.nodes[n])) kept[v] = kept[v] || movable[v];
    }
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      if (host[n]) continue;
      for (graph::ValueId v : graph::tensor_reads(g.nodes[n])) {
        if (kept[v]) {
          host[n] = true;
          changed = true;
          break;
        }
      }
    }
    if (kept_on_cpu != nullptr) *kept_on_cpu = std::move(kept);
  }
  return host;
}

Target choose_target(Program& p) {
  // Kernels: C++ on the CPU; Triton on one CUDA device (or, for tests, in Triton's interpreter).
  const graph::Graph& g = p.traced.graph;
  Target t;
  t.cpu = all_on_cpu(g);
  t.cuda_device = t.cpu ? -1 : one_cuda_device(g);
  t.triton = (t.cpu && p.options.triton.interpret) ||
             (t.cuda_device >= 0 && p.options.triton.enabled && triton_hooks().compile != nullptr);
  if (t.cuda_device >= 0) t.device = c10::Device(c10::DeviceType::CUDA, t.cuda_device);
  if (t.triton && t.cuda_device >= 0) {
    std::vector<bool> kept_on_cpu;
    host_nodes(g, &kept_on_cpu);
    // Kernels read constants from device memory: scalars the graph holds on the CPU move once
    // (but those a host node reads).
    size_t c = 0;
    for (const graph::Input& in : g.inputs) {
      if (in.kind != graph::InputKind::Constant) continue;
      at::Tensor& t_c = p.traced.constants[c++];
      if (t_c.defined() && t_c.device().is_cpu() && t_c.dim() == 0 && !kept_on_cpu[in.value]) {
        t_c = t_c.to(t.device);
      }
    }
  }
  return t;
}

sched::Plan schedule(const Program& p, const Target& t, sched::ScheduleOptions* options) {
  sched::ScheduleOptions& sopts = *options;
  const CompileOptions& o = p.options;
  const graph::Graph& g = p.traced.graph;
  sopts.fuse = o.sched.codegen && (t.cpu || t.triton);
  sopts.reductions = o.sched.reductions;
  sopts.reduction_fusion = o.sched.reduction_fusion;
  sopts.stored_prologues = o.sched.stored_prologues;
  // On the CPU oneDNN's depthwise kernels are 2-7x faster than the generated C++ loops with
  // their guarded window reads (batch 1, 3x3 to 7x7, 2 cores): they stay ATen calls there.
  sopts.depthwise_convolutions = o.sched.depthwise_convolutions && t.triton;
  sopts.index_asserts = t.triton;  // a device-side assert per index read, as eager's CUDA kernels
  sopts.chunk_single_rows = !t.triton;
  sopts.keep_prologue_rows = !t.triton;
  if (t.triton) {
    sopts.min_parallel_rows = 128;  // programs: about an H100's or H200's SMs
    sopts.min_outer_tile = 16;
  }
  sopts.combo_kernels = o.sched.combo_kernels;
  // (From the graph as the passes after choose_target left it: they renumber nodes.)
  if (t.cuda_device >= 0) {
    std::vector<bool> host = host_nodes(g);
    if (!host.empty()) sopts.extern_nodes = std::move(host);
  }
  return schedule_cached(g, sopts, o.sched.plan_cache, o.sched.plan_cache_min_seconds);
}

void generate_kernels(Program& p, const Target& target, sched::Plan& plan,
                      sched::ScheduleOptions& options) {
  const CompileOptions& o = p.options;
  const graph::Graph& g = p.traced.graph;
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
      if (target.triton) {
        // A refused group's nodes become extern for the next round (the last round gives up).
        bool refused = false;
        auto refuse = [&](const sched::KernelGroup& group, const std::string& why) {
          EMBER_UNSUPPORTED(round < kMaxRefusalRounds) << why;
          refused = true;
          if (group.kernel.combo && options.combo_kernels) {
            // Its parts get kernels of their own next round, where the one refused is found.
            options.combo_kernels = false;
            return;
          }
          p.refused_kernels.push_back(why);
          if (options.extern_nodes.empty()) options.extern_nodes.assign(g.nodes.size(), false);
          for (int32_t n : group.nodes) options.extern_nodes[n] = true;
        };
        std::vector<codegen::TritonKernel> forms(plan.groups.size());
        const std::vector<std::vector<graph::ValueId>> private_outputs =
            sched::private_outputs(g, plan);
        for (int gi : live) {
          try {
            forms[gi] = triton_form(plan.groups[gi], private_outputs[gi], o.triton,
                                    fused_label(g, plan.groups[gi]));
          } catch (const Unsupported& e) {
            refuse(plan.groups[gi], e.what());
          }
        }
        if (refused) {
          plan = schedule_cached(g, options, o.sched.plan_cache, o.sched.plan_cache_min_seconds);
          continue;
        }
        // A kernel over shape symbols gets its launch configuration at their hints.
        auto hint_of = [&](const loop::Kernel& k) {
          loop::Bindings b;
          for (const std::string& name : k.size_vars) b[name] = g.symbols.find(name)->hint;
          return b;
        };
        if (target.cuda_device < 0) {
          for (int gi : live) {
            triton_of_group[gi] =
                TritonLaunchable::interpreted(forms[gi], hint_of(plan.groups[gi].kernel));
          }
        } else {  // one batch: compiled in parallel, identical kernels once
          std::vector<codegen::TritonKernel> ks;
          std::vector<std::vector<at::ScalarType>> types;
          std::vector<loop::Bindings> hints;
          for (int gi : live) {
            ks.push_back(forms[gi]);
            types.push_back(buffer_types(p, plan.groups[gi]));
            hints.push_back(hint_of(plan.groups[gi].kernel));
          }
          std::vector<std::string> errors;
          std::vector<std::unique_ptr<TritonLaunchable>> ls = TritonLaunchable::cuda_all(
              ks, types, target.cuda_device, &errors, triton_tuning(o), hints);
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
            plan = schedule_cached(g, options, o.sched.plan_cache, o.sched.plan_cache_min_seconds);
            continue;
          }
        }
      } else {
        std::vector<std::string> sources;
        for (const auto& ks : unit_kernels) sources.push_back(codegen::emit_cpp_unit(ks));
        HostCompileOptions compile_options = HostCompileOptions::from(o.codegen);
        compile_options.prelude = codegen::cpp_prelude();
        compile_options.key_parts.push_back("torch " EMBER_TORCH_VERSION_STRING);
        p.libraries = compile_and_load_all(sources, compile_options);
        p.kernel_sources = sources;
      }
      std::vector<int> kernel_of_group(plan.groups.size(), -1);
      for (int gi : live) {
        const sched::KernelGroup& group = plan.groups[gi];
        Kernel k;
        if (target.triton) {
          k.triton = triton_of_group[gi];
          p.kernel_sources.push_back(k.triton->kernel().source);
        } else {
          k.fn = reinterpret_cast<Kernel::Fn>(
              p.libraries[unit_of[gi]]->symbol(codegen::cpp_kernel_symbol(group.kernel.name)));
        }
        k.inputs = group.inputs;
        k.outputs = group.outputs;
        k.index_status = group.index_status;
        k.description = "kernel " + (target.triton ? k.triton->kernel().name : group.kernel.name);
        // A Triton kernel's name ends with its label already (triton_form).
        k.profile_name =
            "ember::" + (target.triton ? k.triton->kernel().name
                                       : group.kernel.name + "_" + fused_label(g, group));
        if (group.kernel.combo) {
          k.description += " (combo of " + std::to_string(group.kernel.parts().size()) + ")";
        }
        k.symbolic = !group.kernel.size_vars.empty();
        if (k.symbolic) {
          // Over shape symbols: C++ kernels take their values in `sizes`, Triton kernels as
          // arguments after the buffers.
          for (const std::string& name : group.kernel.size_vars) {
            k.size_symbols.push_back(g.symbols.find(name)->id);
          }
          for (graph::ValueId v : group.inputs) {
            k.symbolic_inputs.emplace_back(g.type(v).sizes, g.type(v).strides);
          }
          for (graph::ValueId v : group.outputs) {
            const graph::TensorType& t = g.type(v);
            k.symbolic_outputs.emplace_back(t.sizes, t.strides);
            Kernel::Output out;
            out.options = at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(target.device);
            k.allocations.push_back(std::move(out));
          }
          k.description += " (symbolic):";
        } else {
          k.reuse = group.reuse;
          for (graph::ValueId v : group.inputs) {
            const graph::TensorType& t = g.type(v);
            k.input_layouts.push_back(Kernel::Output{
                graph::constant_values(t.sizes), graph::constant_values(t.strides),
                at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(target.device)});
          }
          for (size_t i = 0; i < group.outputs.size(); ++i) {
            const graph::TensorType& t = g.type(group.outputs[i]);
            Kernel::Output out;
            out.sizes = graph::constant_values(t.sizes);
            out.strides = graph::constant_values(t.strides);
            out.options = at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(target.device);
            if (target.triton) {
              const std::vector<std::string>& unused = k.triton->kernel().unused_buffers;
              const std::string& name = group.kernel.buffers[group.inputs.size() + i].name;
              out.unused = std::find(unused.begin(), unused.end(), name) != unused.end();
              p.num_unwritten_outputs += out.unused ? 1 : 0;
            }
            k.allocations.push_back(std::move(out));
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
        }
        for (size_t j = 0; j < group.nodes.size(); ++j) {
          k.description += (j ? ", " : " ") + g.op_of(g.nodes[group.nodes[j]]).qualified_name();
        }
        kernel_of_group[gi] = static_cast<int>(p.kernels.size());
        p.kernels.push_back(std::move(k));
      }
      p.num_fused_nodes = plan.num_fused_nodes;
      for (const sched::PlanStep& ps : plan.steps) {
        if (ps.kind == sched::PlanStep::Kind::Extern) {
          p.steps.push_back(extern_step(p, ps.index));
        } else if (ps.kind == sched::PlanStep::Kind::View) {
          p.steps.push_back(view_step(p, ps.index, ps.root));
        } else {
          Step step;
          step.kernel = kernel_of_group[ps.index];
          p.steps.push_back(std::move(step));
        }
      }
      ExecutorOptions unfused_options{.compile = o, .symbols_from_caller = p.symbols_from_caller};
      unfused_options.compile.sched.codegen = false;
      unfused_options.compile.runtime.fold_constants = false;
      p.unfused = std::make_unique<Executor>(p.traced, std::move(unfused_options));
      p.triton = target.triton;
      // (The templates are timed at the product's sizes: static graphs only.) Every product
      // under max-autotune; else the launch-bound ones of a CUDA graph, where a replay does not
      // hide the host's time (Note [Launch-bound products]).
      const bool launch_bound = !o.runtime.matmul_templates && target.cuda_device >= 0 &&
                                o.runtime.launch_bound_products > 0 && !o.runtime.cuda_graphs;
      if (target.triton && (o.runtime.matmul_templates || launch_bound) &&
          g.symbols.symbols().empty()) {
        std::vector<int> group_of_kernel(p.kernels.size(), -1);
        for (size_t gi = 0; gi < kernel_of_group.size(); ++gi) {
          if (kernel_of_group[gi] >= 0) group_of_kernel[kernel_of_group[gi]] = static_cast<int>(gi);
        }
        attach_matmul_templates(p, target.cuda_device, plan, group_of_kernel,
                                launch_bound ? o.runtime.launch_bound_products : 0);
      }
      break;
    } catch (const Unsupported& e) {
      p.codegen_error = e.what();
      p.steps.clear();
      p.kernels.clear();
      p.kernel_sources.clear();
      p.num_fused_nodes = 0;
      p.num_unwritten_outputs = 0;
      sched::ScheduleOptions unfused;
      unfused.fuse = false;
      plan = sched::schedule_graph(g, unfused);
      break;
    }
  }
  if (p.steps.empty()) {  // no kernels: extern and view steps only
    for (const sched::PlanStep& ps : plan.steps) {
      EMBER_INTERNAL_ASSERT(ps.kind != sched::PlanStep::Kind::Kernel) << "a kernel step left";
      p.steps.push_back(ps.kind == sched::PlanStep::Kind::View ? view_step(p, ps.index, ps.root)
                                                               : extern_step(p, ps.index));
    }
  }
}

Lifetimes plan_lifetimes(Program& p, bool release_inputs) {
  const graph::Graph& g = p.traced.graph;
  // Last use of each value, so intermediates are freed as soon as possible.
  std::vector<int> last_use(g.values.size(), -1);
  std::vector<int> defined_at(g.values.size(), -1);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    std::vector<graph::ValueId> reads = step_reads(p, step);
    std::vector<graph::ValueId> writes;
    if (step.kernel >= 0) {
      writes = p.kernels[step.kernel].outputs;
      if (step.fused) {  // it may compute the product: its operands live until here
        const MatmulOperands& o = step.matmul_operands;
        reads.insert(reads.end(), {o.a, o.b});
        if (o.bias >= 0) reads.push_back(o.bias);
      }
    } else if (!step.call) {
      for (const ViewOutput& o : step.view->outputs) writes.push_back(o.value);
    } else {
      writes = step.call->outputs;
    }
    for (graph::ValueId v : reads) last_use[v] = static_cast<int>(s);
    for (graph::ValueId v : writes) defined_at[v] = static_cast<int>(s);
  }
  // A collective may read its inputs until its wait returns (an all-gather's input is sent while
  // the program goes on): they live until the step of the wait that reads its result.
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& wait = p.steps[s];
    if (!wait.call || wait.node < 0 || !is_collective_wait(g.op_of(g.nodes[wait.node]))) continue;
    for (graph::ValueId r : step_reads(p, wait)) {
      const int32_t producer = g.values[r].node;
      if (producer < 0 || !is_collective(g.op_of(g.nodes[producer]))) continue;
      for (graph::ValueId in : graph::tensor_reads(g.nodes[producer])) {
        last_use[in] = std::max(last_use[in], static_cast<int>(s));
      }
    }
  }
  const int keep = static_cast<int>(p.steps.size());
  for (graph::ValueId v : g.outputs) last_use[v] = keep;
  for (const graph::Mutation& m : g.mutations) last_use[m.value] = keep;
  p.release_inputs = release_inputs && g.mutations.empty();
  if (!p.release_inputs) {
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
    if (at >= 0 && at < keep) p.steps[at].release.push_back(static_cast<graph::ValueId>(v));
  }
  return Lifetimes{std::move(last_use), std::move(defined_at)};
}

void decide_cuda_graphs(Program& p, const Target& t) {
  const graph::Graph& g = p.traced.graph;
  if (p.options.runtime.cuda_graphs) {
    if (t.cpu) {
      // CPU graphs have no CUDA graph to replay (torch.compile ignores the mode there too).
    } else if (t.cuda_device < 0) {
      p.cuda_graph_note = "the graph uses more than one device";
    } else if (!host_nodes(g).empty()) {
      p.cuda_graph_note = "the graph computes on the CPU too (a replay would not run that)";
    } else if (!g.mutations.empty()) {
      p.cuda_graph_note = "the graph mutates its inputs";
    } else if (p.options.debug.verify_kernels) {
      p.cuda_graph_note = "verify_kernels is on";
    } else if (std::string seeded = first_seeded_op(g); !seeded.empty()) {
      // A replay from C++ does not advance the generator's offset as CUDAGraph.replay() does:
      // every replay would draw the same numbers.
      p.cuda_graph_note = "the graph draws random numbers (" + seeded + ")";
    } else {
      // Parameters and registered buffers are read in place by every replay (cuda_graph.h).
      std::vector<bool> module_state;
      for (graph::ValueId v : p.input_slots) {
        bool state = false;
        for (const graph::Input& in : g.inputs)
          state |= in.value == v && graph::is_module_state(in.kind);
        module_state.push_back(state);
      }
      // Inputs of kernels of parameters only, whose cached outputs a replay reads (Note
      // [Parameter kernels outside the replay], cuda_graph.h).
      std::vector<bool> read_by_cached(g.values.size(), false);
      for (const Kernel& k : p.kernels) {
        if (!k.parameter_cache) continue;
        for (graph::ValueId v : k.inputs) read_by_cached[v] = true;
      }
      std::vector<bool> versioned;
      for (graph::ValueId v : p.input_slots) versioned.push_back(read_by_cached[v]);
      p.cuda_graph = std::make_unique<CudaGraphRunner>(t.cuda_device, std::move(module_state),
                                                       std::move(versioned));
      p.cuda_graph_note.clear();
    }
  }
}

}  // namespace ember::runtime
