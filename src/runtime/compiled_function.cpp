#include "runtime/compiled_function.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/enum_tag.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "graph/cse.h"
#include "graph/partition.h"
#include "runtime/collectives.h"
#include "sched/index_ops.h"
#include "sched/pointwise.h"
#include "sched/reduction.h"
#include "support/error.h"
#include "tracer/autograd_node.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace ag = torch::autograd;

struct CompiledFunction::State {
  JointSignature signature;
  std::vector<int> saved_inputs;  ///< graph::JointSplit::saved_inputs, in the primals' numbering
  int num_forward_outputs = 0;
  std::optional<Executor> forward, backward;
  RunScope backward_scope;
  // Note [Gradients no loss reached]: the backward graph, and its programs compiled for calls
  // where some tangents are undefined (by which ones), made on first need.
  tracer::TracedGraph backward_graph;
  ExecutorOptions backward_options;
  mutable std::mutex variants_mutex;
  mutable std::map<std::vector<bool>, std::shared_ptr<Executor>> zero_tangent_variants;
};

namespace {

using tracer::make_node;
using tracer::NodePtr;

// Note [Gradients no loss reached]
// A program output that no loss reaches (a language model's logits, returned next to its loss)
// gets no gradient: autograd passes an undefined tensor, and the backward program was traced
// with a tangent of the output's size. Filled with zeros, it would cost a write and a read of
// the whole tensor and its memory (DistilBERT's f32 logits: 8 GB). So a call with undefined
// tangents runs the backward compiled again with each of those tangents a single zero, read by
// broadcast (an expand of a 0-dim input), made on the first such call and kept.
tracer::TracedGraph with_zero_tangents(const tracer::TracedGraph& traced,
                                       const std::vector<bool>& zero_input) {
  const graph::Graph& g = traced.graph;
  graph::Graph out;
  out.ops = g.ops;
  out.symbols = g.symbols;
  std::vector<graph::ValueId> remap(g.values.size(), -1);
  auto expand = c10::Dispatcher::singleton().findSchemaOrThrow("aten::expand", "");
  size_t non_constant = 0;
  for (const graph::Input& in : g.inputs) {
    const graph::TensorType& t = g.type(in.value);
    const bool zero = in.kind != graph::InputKind::Constant && zero_input.at(non_constant++);
    if (!zero) {
      remap[in.value] = out.add_input(t, in.kind, in.name);
      continue;
    }
    graph::TensorType scalar = t;
    scalar.sizes.clear();
    scalar.strides.clear();
    scalar.storage_offset = 0;
    const graph::ValueId v = out.add_input(scalar, in.kind, in.name);
    graph::TensorType broadcast = scalar;
    broadcast.sizes = t.sizes;
    broadcast.strides.assign(t.sizes.size(), graph::DimExpr(0));
    const int32_t node =
        out.add_node(out.intern_op(tracer::op_info(expand.schema())),
                     {graph::ValueRef{v}, graph::int_list_arg(t.sizes), false}, {broadcast});
    remap[in.value] = out.nodes[node].outputs[0];
  }
  for (const graph::Node& n : g.nodes) graph::copy_node(g, n, out, remap);
  for (graph::ValueId o : g.outputs) out.outputs.push_back(remap.at(o));
  return tracer::TracedGraph{std::move(out), traced.constants};
}

struct OutputMeta {
  std::vector<int64_t> sizes;
  at::TensorOptions options;
};

// The backward program for calls whose tangents `undefined` says are undefined (Note
// [Gradients no loss reached]), or nullptr when it cannot be made (then zeros of full size).
std::shared_ptr<Executor> zero_tangent_program(const CompiledFunction::State& s,
                                               const std::vector<bool>& undefined) {
  std::lock_guard<std::mutex> lock(s.variants_mutex);
  auto it = s.zero_tangent_variants.find(undefined);
  if (it != s.zero_tangent_variants.end()) return it->second;
  // Non-constant inputs of the backward: the saved values, then the tangents.
  std::vector<bool> zero_input(s.saved_inputs.size(), false);
  zero_input.insert(zero_input.end(), undefined.begin(), undefined.end());
  std::shared_ptr<Executor> program;
  try {
    program = std::make_shared<Executor>(with_zero_tangents(s.backward_graph, zero_input),
                                         s.backward_options);
  } catch (const std::exception&) {
    program = nullptr;  // the full-size zeros still work
  }
  s.zero_tangent_variants.emplace(undefined, program);
  return program;
}

struct CompiledBackward : ag::Node {
  std::shared_ptr<const CompiledFunction::State> state;
  std::vector<ag::SavedVariable> saved;
  std::vector<OutputMeta> tangent_meta;  ///< for gradients that no loss reached: zeros
  /// The forward call's values of the shape symbols (by id), which the backward program takes
  /// from its caller (ExecutorOptions::symbols_from_caller); empty for a static graph.
  std::vector<int64_t> symbols;
  bool released = false;
  /// Double backward's fallback, with every primal of the call (when each was a leaf).
  std::shared_ptr<const EagerBackward> eager;
  std::vector<ag::SavedVariable> primals;
  std::string no_replay;  ///< why double backward cannot fall back, when it cannot

  ag::variable_list apply(ag::variable_list&& grads) override {
    EMBER_CHECK(!released)
        << "trying to backward through an ember-compiled graph a second time, after its saved "
        << "values were freed: pass retain_graph=True to the first backward";
    if (at::GradMode::is_enabled()) return double_backward(grads);
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size() + grads.size());
    for (const ag::SavedVariable& s : saved) inputs.push_back(s.unpack());
    EMBER_INTERNAL_ASSERT(grads.size() == tangent_meta.size())
        << "the backward got " << grads.size() << " gradients for " << tangent_meta.size()
        << " outputs";
    std::vector<bool> undefined(grads.size(), false);
    bool any_undefined = false;
    for (size_t i = 0; i < grads.size(); ++i) {
      undefined[i] = !grads[i].defined();
      any_undefined = any_undefined || undefined[i];
    }
    const Executor* program = &*state->backward;
    std::shared_ptr<Executor> variant;
    if (any_undefined) variant = zero_tangent_program(*state, undefined);
    if (variant) program = variant.get();
    for (size_t i = 0; i < grads.size(); ++i) {
      // The tangents were traced contiguous. A gradient with other strides (`y.sum().backward()`
      // passes ones expanded over y, all strides 0) would send the whole backward program to
      // its unfused form (Executor::strides_match): one contiguous copy is far cheaper.
      if (!undefined[i]) {
        inputs.push_back(grads[i].contiguous());
      } else if (variant) {  // Note [Gradients no loss reached]: one zero, read by broadcast
        inputs.push_back(at::zeros({}, tangent_meta[i].options));
      } else {
        inputs.push_back(at::zeros(tangent_meta[i].sizes, tangent_meta[i].options));
      }
    }
    if (!ag::get_current_graph_task_keep_graph()) {
      // No second backward will come: the saved values go now, and the backward program frees
      // each after its last use (ExecutorOptions::release_inputs), as eager autograd frees a
      // node's saved tensors once it has run. Otherwise they would all live to the end.
      release_variables();
    }
    std::vector<at::Tensor> out;
    auto body = [&] { out = program->run(std::move(inputs), symbols); };
    if (state->backward_scope) {
      state->backward_scope(body);
    } else {
      body();
    }
    return ag::variable_list(out.begin(), out.end());
  }

  // create_graph=True: the compiled backward records no history, so the program runs again
  // eagerly on the call's inputs and autograd differentiates that (EagerBackward).
  ag::variable_list double_backward(const ag::variable_list& grads) {
    EMBER_UNSUPPORTED(no_replay.empty())
        << "double backward (create_graph=True) through an ember-compiled graph: " << no_replay;
    std::vector<at::Tensor> args;
    args.reserve(primals.size());
    for (const ag::SavedVariable& p : primals) args.push_back(p.unpack());
    std::vector<at::Tensor> gs;
    for (size_t i = 0; i < grads.size(); ++i) {
      gs.push_back(grads[i].defined() ? grads[i]
                                      : at::zeros(tangent_meta[i].sizes, tangent_meta[i].options));
    }
    std::vector<at::Tensor> out = (*eager)(args, gs);
    EMBER_INTERNAL_ASSERT(out.size() == state->signature.grad_inputs.size())
        << "double backward's fallback returned " << out.size() << " gradients for "
        << state->signature.grad_inputs.size() << " inputs";
    return ag::variable_list(out.begin(), out.end());
  }

  void release_variables() override {
    saved.clear();
    primals.clear();
    released = true;
  }

  std::string name() const override { return "EmberCompiledBackward"; }
};

bool is_view(const graph::Graph& g, const graph::Node& n) {
  const std::optional<sched::IndexOpKind> kind = sched::index_op_kind(g, n);
  return kind.has_value() && *kind == sched::IndexOpKind::View;
}

// Note [Parameters gathered again in the backward]
// FSDP written with functional collectives (SimpleFSDP's way: each parameter a shard, the
// forward all-gathers it, the all-gather's backward reduce-scatters its gradient) saved the
// gathered weights for the backward: every layer's whole parameters held from the forward to the
// backward, FSDP2's reshard_after_forward=False. An all-gather (and its wait) of a parameter,
// directly or through views and pointwise ops of it alone (a cast to the compute dtype), may run
// again in the backward, and is not banned from it by a backward product reading it: the min-cut
// then saves the shard, the forward frees the gathered weight after its layer, and the backward
// gathers it again, as FSDP2 does by default. An all-gather of activations (tensor and sequence
// parallelism) is saved as before.
bool gathers_a_parameter(const graph::Graph& g, const graph::Node& n) {
  const graph::Node* gather = &n;
  if (is_collective_wait(g.op_of(n))) {
    const std::vector<graph::ValueId> reads = graph::tensor_reads(n);
    if (reads.size() != 1 || g.values[reads[0]].node < 0) return false;
    gather = &g.nodes[static_cast<size_t>(g.values[reads[0]].node)];
  }
  if (g.op_of(*gather).name != "_c10d_functional::all_gather_into_tensor") return false;
  std::vector<graph::ValueId> reads = graph::tensor_reads(*gather);
  if (reads.size() != 1) return false;
  graph::ValueId v = reads[0];
  while (g.values[v].node >= 0) {
    const graph::Node& p = g.nodes[static_cast<size_t>(g.values[v].node)];
    reads = graph::tensor_reads(p);
    if (reads.size() != 1 || !(sched::is_pointwise(g, p) || is_view(g, p))) return false;
    v = reads[0];
  }
  return g.inputs[static_cast<size_t>(g.values[v].index)].kind == graph::InputKind::Parameter;
}

// What the min-cut partition may run again in the backward: pointwise ops and views that the
// scheduler fuses (they cost no launch of their own there), never random ones; and all-gathers
// of parameters (Note [Parameters gathered again in the backward]).
bool recomputable(const graph::Graph& g, const graph::Node& n) {
  if (gathers_a_parameter(g, n)) return true;
  const graph::OpInfo& info = g.op_of(n);
  auto op = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
  if (!op.has_value() || op->hasTag(at::Tag::nondeterministic_seeded)) return false;
  return sched::is_pointwise(g, n) || is_view(g, n);
}

// What the scheduler runs as an extern, reading its arguments from memory: not a pointwise op,
// an index op or a reduction it fuses.
bool reads_memory(const graph::Graph& g, const graph::Node& n) {
  return !sched::is_pointwise(g, n) && !sched::index_op_kind(g, n).has_value() &&
         !sched::is_reduction_kernel_node(g, n);
}

// What merge_common_subexpressions may merge: ops that compute the same from the same arguments.
bool deterministic(const graph::Graph& g, const graph::Node& n) {
  const graph::OpInfo& info = g.op_of(n);
  auto op = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
  return op.has_value() && !op->hasTag(at::Tag::nondeterministic_seeded);
}

}  // namespace

JointSignature joint_signature(const graph::Graph& joint, int num_primals, int num_forward_outputs,
                               std::vector<int> tangent_outputs, std::vector<int> grad_inputs) {
  JointSignature sig;
  int seen = 0;
  for (const graph::Input& in : joint.inputs) {
    const bool constant = in.kind == graph::InputKind::Constant;
    sig.is_tangent.push_back(!constant && seen++ >= num_primals);
  }
  EMBER_INTERNAL_ASSERT(seen - num_primals == static_cast<int>(tangent_outputs.size()))
      << "a joint graph of " << seen - num_primals << " tangents for " << tangent_outputs.size()
      << " differentiable outputs";
  sig.num_forward_outputs = num_forward_outputs;
  sig.tangent_outputs = std::move(tangent_outputs);
  sig.grad_inputs = std::move(grad_inputs);
  return sig;
}

TrainingGraphs split_training_graph(const tracer::TracedGraph& joint,
                                    const JointSignature& signature,
                                    const CompileOptions::Training& options) {
  graph::SplitOptions split_options;
  if (options.min_cut) split_options.recomputable = recomputable;
  // Note [Values the backward writes anyway are saved] (graph/partition.cpp).
  if (options.min_cut && options.save_materialized) {
    split_options.reads_memory = reads_memory;
    split_options.is_view = is_view;
    split_options.recompute_for_memory = gathers_a_parameter;
  }
  const graph::Graph merged = graph::merge_common_subexpressions(joint.graph, deterministic);
  graph::JointSplit split = graph::split_joint(merged, signature.is_tangent,
                                               signature.num_forward_outputs, split_options);
  auto constants = [&](const std::vector<int>& which) {
    std::vector<at::Tensor> out;
    for (int c : which) out.push_back(joint.constants.at(c));
    return out;
  };
  TrainingGraphs out;
  // The size relations the joint's trace relied on: over the forward's inputs, which bind every
  // symbol (CompiledFunction::size_guards_hold).
  out.forward = tracer::TracedGraph{std::move(split.forward), constants(split.forward_constants),
                                    joint.size_guards};
  out.backward =
      tracer::TracedGraph{std::move(split.backward), constants(split.backward_constants)};
  out.split = std::move(split);
  return out;
}

CompiledFunction::CompiledFunction(tracer::TracedGraph joint, JointSignature signature,
                                   ExecutorOptions options, RunScope backward_scope) {
  TrainingGraphs graphs = split_training_graph(joint, signature, options.compile.training);
  saved_bytes_ = graphs.split.saved_bytes;
  options.compile.runtime.parameter_cache = false;  // each training step changes the parameters
  auto state = std::make_shared<State>();
  // Joint input index -> index among the non-constant primals (what a caller passes).
  std::vector<int> primal_number(joint.graph.inputs.size(), -1);
  int next = 0;
  for (size_t i = 0; i < joint.graph.inputs.size(); ++i) {
    if (!signature.is_tangent[i] && joint.graph.inputs[i].kind != graph::InputKind::Constant) {
      primal_number[i] = next++;
    }
  }
  for (int s : graphs.split.saved_inputs) {
    state->saved_inputs.push_back(s < 0 ? -1 : primal_number[s]);
  }
  state->forward.emplace(std::move(graphs.forward), options);
  ExecutorOptions backward_options = options;
  backward_options.release_inputs = true;
  backward_options.symbols_from_caller = true;
  state->backward_graph = graphs.backward;
  state->backward_options = backward_options;
  state->backward.emplace(std::move(graphs.backward), backward_options);
  state->num_forward_outputs = signature.num_forward_outputs;
  state->backward_scope = std::move(backward_scope);
  state->signature = std::move(signature);
  state_ = std::move(state);
  replayable_ = joint.graph.mutations.empty();
  for (const graph::Node& n : joint.graph.nodes) {
    const graph::OpInfo& info = joint.graph.op_of(n);
    auto op = c10::Dispatcher::singleton().findSchema({info.name, info.overload});
    if (op.has_value() && op->hasTag(at::Tag::nondeterministic_seeded)) replayable_ = false;
  }
}

void CompiledFunction::set_eager_backward(EagerBackward f) {
  eager_backward_ = std::make_shared<const EagerBackward>(std::move(f));
}

CompiledFunction::~CompiledFunction() = default;

const Executor& CompiledFunction::forward() const {
  return *state_->forward;
}
const Executor& CompiledFunction::backward() const {
  return *state_->backward;
}
int CompiledFunction::num_forward_outputs() const {
  return state_->num_forward_outputs;
}
int CompiledFunction::num_zero_tangent_programs() const {
  std::lock_guard<std::mutex> lock(state_->variants_mutex);
  int n = 0;
  for (const auto& [mask, program] : state_->zero_tangent_variants) n += program != nullptr;
  return n;
}
bool CompiledFunction::size_guards_hold(const std::vector<at::Tensor>& inputs) const {
  return state_->forward->size_guards_hold(inputs);
}

int CompiledFunction::num_saved() const {
  return static_cast<int>(state_->saved_inputs.size());
}

std::vector<at::Tensor> CompiledFunction::run(const std::vector<at::Tensor>& inputs) const {
  const State& s = *state_;
  const std::vector<int>& rebased = s.signature.rebased_inputs;
  const size_t num_program_outputs = s.num_forward_outputs - rebased.size();
  if (at::GradMode::is_enabled()) {
    // Traced as a non-leaf: eager raises before the in-place op changes anything.
    for (int i : rebased) {
      const at::Tensor& x = inputs.at(i);
      TORCH_CHECK(!(x.is_leaf() && x.requires_grad()),
                  "a leaf Variable that requires grad is being used in an in-place operation.");
    }
  }
  std::vector<int64_t> symbols;  // the backward takes the forward call's values
  std::vector<at::Tensor> all = s.forward->run_and_bind(inputs, &symbols);
  std::vector<at::Tensor> outputs(all.begin(), all.begin() + s.num_forward_outputs);
  bool needs_grad = false;
  if (at::GradMode::is_enabled()) {
    for (int i : s.signature.grad_inputs) needs_grad = needs_grad || inputs.at(i).requires_grad();
  }
  if (!needs_grad) {
    outputs.resize(num_program_outputs);
    return outputs;
  }

  NodePtr node = make_node<CompiledBackward>();
  auto* backward = static_cast<CompiledBackward*>(node.get());
  backward->state = state_;
  backward->symbols = std::move(symbols);
  if (!eager_backward_) {
    backward->no_replay = "not supported (no eager fallback is installed)";
  } else if (!replayable_) {
    backward->no_replay =
        "not supported for a graph that mutates its inputs (BatchNorm's running statistics) or "
        "draws random numbers (dropout): running it again would change them";
  } else {
    // Leaves only: the program is run again on these tensors, so their history must not be
    // needed (a leaf's is itself), and a leaf is held by its owner anyway (no memory kept).
    for (size_t i = 0; i < inputs.size() && backward->no_replay.empty(); ++i) {
      if (inputs[i].grad_fn()) {
        backward->no_replay = "input " + std::to_string(i) +
                              " of the compiled graph is not a leaf of autograd's graph (only "
                              "leaves, such as parameters, are kept to run it again eagerly)";
      }
    }
    if (backward->no_replay.empty()) {
      backward->eager = eager_backward_;
      for (const at::Tensor& x : inputs) backward->primals.emplace_back(x, false);
    }
  }
  size_t next_saved = s.num_forward_outputs;
  for (int from_input : s.saved_inputs) {
    // An intermediate is saved detached (it may also be an output, whose grad_fn is this node:
    // a cycle otherwise); the alias shares its version counter, so in-place changes are caught.
    if (from_input < 0) {
      backward->saved.emplace_back(all.at(next_saved++).detach(), false);
    } else {
      backward->saved.emplace_back(inputs.at(from_input), false);
    }
  }
  std::vector<at::Tensor> grad_inputs;
  for (int i : s.signature.grad_inputs) grad_inputs.push_back(inputs.at(i));
  node->set_next_edges(ag::collect_next_edges(grad_inputs));
  std::vector<const c10::TensorImpl*> attached;
  std::vector<std::pair<at::Tensor, at::Tensor>> copied_views;  // (input, its new value)
  for (int o : s.signature.tangent_outputs) {
    if (static_cast<size_t>(o) >= num_program_outputs) {
      // An input modified in place: it takes this node as its history, its data already the
      // forward's (Note [Traced inputs modified in place]). A view of another tensor cannot take
      // a node of several gradients: its new value (an output) takes it, copied in below.
      const at::Tensor& x = inputs.at(rebased.at(o - num_program_outputs));
      backward->tangent_meta.push_back({x.sizes().vec(), x.options()});
      if (x.is_view()) {
        at::Tensor value = outputs.at(o);
        if (value.is_alias_of(x)) value = value.clone();
        ag::create_gradient_edge(value, node);
        copied_views.emplace_back(x, value);
      } else {
        ag::impl::bump_version(x);  // what the program saved of it is out of date
        ag::impl::rebase_history(x, ag::Edge(node, node->add_input_metadata(x)));
      }
      continue;
    }
    at::Tensor& out = outputs.at(o);
    // An output that is an input or shares its memory (a view) would take this node as an
    // input's grad_fn, and one tensor returned twice can have one gradient edge: each runs as a
    // copy instead.
    bool copy =
        std::find(attached.begin(), attached.end(), out.unsafeGetTensorImpl()) != attached.end();
    for (const at::Tensor& in : inputs) copy = copy || out.is_alias_of(in);
    if (copy) out = out.clone();
    attached.push_back(out.unsafeGetTensorImpl());
    backward->tangent_meta.push_back({out.sizes().vec(), out.options()});
    ag::create_gradient_edge(out, node);
  }
  for (auto& [x, value] : copied_views) {
    at::AutoGradMode grad(true);
    x.copy_(value);  // autograd rebases the view's base onto the value's history
  }
  outputs.resize(num_program_outputs);
  return outputs;
}

}  // namespace ember::runtime
