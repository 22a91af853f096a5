#include "sched/fusion.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "sched/batch_norm.h"
#include "sched/combo.h"
#include "sched/depthwise_conv.h"
#include "sched/fusion_internal.h"
#include "sched/index_ops.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/pooling.h"
#include "sched/reduction.h"
#include "sched/reduction_spec.h"
#include "sched/scatter.h"
#include "sched/size_expr.h"
#include "sched/upsample.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using namespace fusion_detail;

// Rounds of the cost rule (each realizes the outermost offenders and rebuilds the plan).
constexpr int kMaxCostRounds = 16;

bool kernel_value(const graph::Graph& g, ValueId v) {
  const graph::TensorType& t = g.type(v);
  return kernel_device(t.device) && to_loop_dtype(t.dtype) && t.is_static();
}

// A value of symbolic type a kernel can compute or read (on a kernel device, with a loop-IR
// dtype): C++ kernels on the CPU, Triton kernels on CUDA, both taking the symbols as arguments.
bool symbolic_kernel_value(const graph::Graph& g, ValueId v) {
  const graph::TensorType& t = g.type(v);
  return !t.is_static() && kernel_device(t.device) && to_loop_dtype(t.dtype);
}

// A node over symbolic types (issue 35): pointwise ones fuse, reductions are kernels (their
// loops run over the symbols, size_expr.h), views are read through at their traced geometry
// (Note [Views over shape symbols] in index_ops.cpp) and the computing index ops whose index
// functions hold over symbols (Rule::symbolic: cat, stack, embedding, factories) fuse as in a
// static graph; the rest stay ATen calls, evaluating their symbolic arguments per call.
std::optional<NodeClass> classify_symbolic(const graph::Graph& g, const graph::Node& n,
                                           const ScheduleOptions& options) {
  bool symbolic = false;
  std::vector<ValueId> values = all_reads(n);
  values.insert(values.end(), n.outputs.begin(), n.outputs.end());
  for (ValueId v : values) symbolic |= !g.type(v).is_static();
  if (!symbolic) return std::nullopt;
  for (ValueId v : values) {
    if (!kernel_value(g, v) && !symbolic_kernel_value(g, v)) return NodeClass::Extern;
  }
  if (options.reductions && is_reduction_kernel_node(g, n)) return NodeClass::Reduction;
  const std::optional<IndexOpKind> kind = index_op_kind(g, n);
  if (kind == IndexOpKind::View) return NodeClass::View;
  if (n.outputs.size() == 1 && is_pointwise(g, n)) return NodeClass::Pointwise;
  return kind == IndexOpKind::Compute ? NodeClass::Compute : NodeClass::Extern;
}

NodeClass classify(const graph::Graph& g, int32_t index, const ScheduleOptions& options) {
  const graph::Node& n = g.nodes[index];
  if (!options.fuse) return NodeClass::Extern;
  if (static_cast<size_t>(index) < options.extern_nodes.size() && options.extern_nodes[index]) {
    return NodeClass::Extern;
  }
  if (std::optional<NodeClass> c = classify_symbolic(g, n, options)) return *c;
  if (options.reductions && is_reduction_kernel_node(g, n)) return NodeClass::Reduction;
  for (ValueId v : n.outputs) {
    if (!kernel_value(g, v)) return NodeClass::Extern;
  }
  for (ValueId v : all_reads(n)) {
    if (!kernel_value(g, v)) return NodeClass::Extern;
  }
  if (is_scatter_kernel_node(g, n)) return NodeClass::Scatter;
  if (n.outputs.size() == 1 && is_pointwise(g, n)) return NodeClass::Pointwise;
  if (!options.depthwise_convolutions && is_depthwise_convolution(g, n)) return NodeClass::Extern;
  std::optional<IndexOpKind> kind = index_op_kind(g, n);
  if (!kind) return NodeClass::Extern;
  if (needs_realized_input(g, n)) {
    // as_strided's storage offset is absolute, and a graph input's offset may differ per call.
    ValueId root = view_input(g, n);
    while (g.values[root].node >= 0 &&
           index_op_kind(g, g.nodes[g.values[root].node]) == IndexOpKind::View) {
      root = view_input(g, g.nodes[g.values[root].node]);
    }
    if (g.values[root].node < 0) return NodeClass::Extern;
  }
  return *kind == IndexOpKind::View ? NodeClass::View : NodeClass::Compute;
}

class Scheduler final : public FusionState {
 public:
  Scheduler(const graph::Graph& g, const ScheduleOptions& options) : g_(g), options_(options) {}

  Plan run();

  const graph::Graph& graph() const override { return g_; }
  bool index_asserts() const override { return options_.index_asserts; }
  NodeClass node_class(ValueId v) const override {
    int32_t n = g_.values[v].node;
    return n < 0 ? NodeClass::Extern : cls_[n];
  }
  /// Lives in memory: a graph input, the output of an extern, reduction or view step, or a
  /// kernel output.
  bool realized(ValueId v) const override {
    NodeClass c = node_class(v);
    return c == NodeClass::Extern || c == NodeClass::Reduction || c == NodeClass::ViewStep ||
           c == NodeClass::Scatter || stored_[v];
  }
  /// An output of a view node the kernels read through: a fusible view, or one that is also a
  /// view step because something outside the kernels needs it.
  bool is_view(ValueId v) const override {
    int32_t n = g_.values[v].node;
    return n >= 0 && view_node_[n];
  }
  /// The value a view aliases at the end of its chain of views: the first value that is not a
  /// view's output.
  ValueId view_root(ValueId v) const override {
    while (is_view(v)) v = view_input(g_, g_.nodes[g_.values[v].node]);
    return v;
  }

 private:
  void find_demands();
  void find_order();
  ValueId prologue_input(const graph::Node& n) const;
  // One pass over order_. Values over an instance limit are realized as they are found (stored_,
  // and `*found` grows): the pass then drops its open kernels, handles the node again and goes
  // on, to find the others in the same pass; its plan is only good when none was found.
  Plan build(std::vector<std::pair<int, Use>>* uses, std::vector<ValueId>* found);
  // Marks `v`, over an instance limit, stored from now on and adds it to `*found` (at most once
  // per value, so the passes end). A view is never stored (kernels read through it): realizing
  // its root is what helps, and TooManyInstances names roots.
  void realize_found(ValueId v, std::vector<ValueId>* found) {
    EMBER_INTERNAL_ASSERT(!is_view(v)) << "realizing view %" << v;
    EMBER_INTERNAL_ASSERT(!stored_[v]) << "value %" << v << " realized twice";
    stored_[v] = true;
    found->push_back(v);
  }
  int cost(ValueId v, std::vector<int>& weights) const;
  bool generated(ValueId v) const;
  template <typename InMemory, typename Inlined>
  bool walk_inlined(ValueId v, InMemory&& in_memory, Inlined&& inlined) const;
  int weight(ValueId u) const;
  std::vector<ValueId> stored_prologue(int32_t reduction, const KernelBuilder* open,
                                       bool nothing_pending) const;
  std::vector<ValueId> violators(const std::vector<std::pair<int, Use>>& uses) const;

  const graph::Graph& g_;
  ScheduleOptions options_;
  std::vector<NodeClass> cls_;   // per node
  std::vector<bool> view_node_;  // per node: a view op kernels read through (see is_view)
  std::vector<bool> live_;       // per node: its values are needed
  std::vector<bool> stored_;     // per value: written by a kernel
  std::vector<bool> read_live_;  // per value: read by a live node, an output or a mutation
  std::vector<int32_t> order_;   // the nodes in the order build visits them (find_order)
};

// ---- Scheduler ----------------------------------------------------------------------------------

// Which nodes are live and which values kernels must write. Walks the graph backwards: a value is
// needed (must exist in memory) when it is a graph output, a mutation value, an argument of an
// extern or reduction step, an index tensor, or the input of as_strided. A needed view becomes an
// extern step (it aliases its input, which then is needed); a needed computed value is stored.
void Scheduler::find_demands() {
  const size_t num_values = g_.values.size();
  std::vector<bool> need(num_values, false);
  read_live_.assign(num_values, false);
  stored_.assign(num_values, false);
  live_.assign(g_.nodes.size(), false);
  for (ValueId v : g_.outputs) need[v] = read_live_[v] = true;
  for (const graph::Mutation& m : g_.mutations) need[m.value] = read_live_[m.value] = true;
  for (size_t i = g_.nodes.size(); i-- > 0;) {
    const graph::Node& n = g_.nodes[i];
    bool needed = false, read = false;
    for (ValueId o : n.outputs) {
      needed |= need[o];
      read |= read_live_[o];
    }
    switch (cls_[i]) {
      case NodeClass::Extern:
        live_[i] = true;
        break;
      case NodeClass::View:
        if (needed) cls_[i] = NodeClass::ViewStep;
        live_[i] = read;
        break;
      case NodeClass::ViewStep:
        EMBER_INTERNAL_ASSERT(false) << "view steps are decided here";
        break;
      case NodeClass::Scatter:
        live_[i] = read;
        break;
      case NodeClass::Reduction:
      case NodeClass::Pointwise:
      case NodeClass::Compute:
        live_[i] = read;
        if (needed && cls_[i] != NodeClass::Reduction) stored_[n.outputs[0]] = true;
        break;
    }
    if (!live_[i]) continue;
    for (ValueId v : all_reads(n)) read_live_[v] = true;
    if (cls_[i] == NodeClass::Extern || cls_[i] == NodeClass::Reduction ||
        cls_[i] == NodeClass::Scatter) {
      const ValueId inline_input = cls_[i] == NodeClass::Reduction ? prologue_input(n) : -1;
      for (ValueId v : all_reads(n)) need[v] = need[v] || v != inline_input;
    } else {
      // Index tensors and as_strided's input are read from memory, and a view step is made from
      // its root: their roots must exist.
      for (ValueId v : index_tensor_args(g_, n)) need[view_root(v)] = true;
      if (needs_realized_input(g_, n)) need[view_root(view_input(g_, n))] = true;
      if (cls_[i] == NodeClass::ViewStep) need[view_root(n.outputs[0])] = true;
    }
  }
}

// Note [Casts of inputs move to their reader]
// Autocast casts a linear's bias and weight just before its activation: layer_norm, cast b, cast
// W, cast x, addmm. Visited in graph order, the weight's cast (another shape) would close the
// layer norm's kernel before the activation's cast could join it as an epilogue, so the norm
// would write its f32 output and a kernel of its own read it back to cast it, per norm per step.
// build visits a cast of a graph input right before the first node that reads it instead: its
// inputs exist from the start, so any later place is still in dependency order.
void Scheduler::find_order() {
  const size_t num_nodes = g_.nodes.size();
  std::vector<int32_t> first_reader(g_.values.size(), -1);
  for (size_t i = num_nodes; i-- > 0;) {
    for (ValueId v : all_reads(g_.nodes[i])) first_reader[v] = static_cast<int32_t>(i);
  }
  // Casts placed right before each node, in graph order.
  std::vector<std::vector<int32_t>> before(num_nodes);
  std::vector<bool> moved(num_nodes, false);
  for (size_t i = 0; i < num_nodes; ++i) {
    const graph::Node& n = g_.nodes[i];
    if (cls_[i] != NodeClass::Pointwise || !g_.op_of(n).is(graph::OpKind::_to_copy)) continue;
    const std::vector<ValueId> reads = tensor_args(n);
    if (reads.size() != 1 || g_.values[reads[0]].node >= 0) continue;
    const int32_t reader = first_reader[n.outputs[0]];
    if (reader < 0) continue;  // read only as a graph output: where it is
    before[reader].push_back(static_cast<int32_t>(i));
    moved[i] = true;
  }
  order_.clear();
  for (size_t i = 0; i < num_nodes; ++i) {
    order_.insert(order_.end(), before[i].begin(), before[i].end());
    if (!moved[i]) order_.push_back(static_cast<int32_t>(i));
  }
}

// Reads every element as a placeholder variable: an index function's own expression, for its
// cost.
class PlaceholderReader final : public ElementReader {
 public:
  explicit PlaceholderReader(const graph::Graph& g) : g_(g) {}
  Expr element(ValueId v, const Index&, bool) override {
    return loop::Var::make("x" + std::to_string(v), *to_loop_dtype(g_.type(v).dtype));
  }
  Expr index_element(ValueId, const Index&, const Expr&, bool) override { return loop::idx(0); }

 private:
  const graph::Graph& g_;
};

// The input of reduction node `n` when its kernel may compute it inline (a prologue): a computed
// value, or a view of one, that is no other argument of `n`; else -1.
ValueId Scheduler::prologue_input(const graph::Node& n) const {
  if (!options_.reduction_fusion || !supports_reduction_fusion(g_, n)) return -1;
  std::optional<ReductionSpec> spec = analyze_reduction(g_, n, /*coalesce=*/false);
  const ValueId x = spec->x.value;
  int reads = 0;
  for (ValueId v : all_reads(n)) reads += v == x;
  if (reads != 1) return -1;
  ValueId root = x;
  while (g_.values[root].node >= 0 && view_node_[g_.values[root].node]) {
    root = view_input(g_, g_.nodes[g_.values[root].node]);
  }
  const int32_t node = g_.values[root].node;
  if (node < 0) return -1;
  const NodeClass c = cls_[node];
  return c == NodeClass::Pointwise || c == NodeClass::Compute ? x : -1;
}

// Visits what `v`'s inlined expression is made of, each value once, reading through views:
// `inlined(u)` for each computed value (v first), `in_memory(u)` for each realized one, which
// returns false to stop the walk (walk_inlined then returns false).
template <typename InMemory, typename Inlined>
bool Scheduler::walk_inlined(ValueId v, InMemory&& in_memory, Inlined&& inlined) const {
  std::set<ValueId> seen;
  std::vector<ValueId> stack{v};
  while (!stack.empty()) {
    ValueId u = stack.back();
    stack.pop_back();
    if (!seen.insert(u).second) continue;
    if (is_view(u)) {  // a remap, read through whether or not it is also an extern step
      stack.push_back(view_input(g_, g_.nodes[g_.values[u].node]));
      continue;
    }
    if (realized(u)) {
      if (!in_memory(u)) return false;
      continue;
    }
    inlined(u);
    for (ValueId r : all_reads(g_.nodes[g_.values[u].node])) stack.push_back(r);
  }
  return true;
}

// What computing computed value `u` from its operands costs, its own node only.
int Scheduler::weight(ValueId u) const {
  const graph::Node& n = g_.nodes[g_.values[u].node];
  if (node_class(u) == NodeClass::Pointwise) {
    std::vector<Expr> in;
    for (ValueId a : tensor_args(n)) {
      in.push_back(
          loop::Var::make("x" + std::to_string(in.size()), *to_loop_dtype(g_.type(a).dtype)));
    }
    return expression_cost(lower_pointwise(g_, n, in));
  }
  if (is_batch_norm_inference(g_, n)) {  // arithmetic on its operands
    PlaceholderReader reader(g_);
    Index index;
    for (size_t d = 0; d < g_.type(u).sizes.size(); ++d) index.push_back(loop::idx(0));
    return expression_cost(lower_batch_norm_inference(g_, n, index, reader));
  }
  if (is_pool(g_, n)) return pool_window(g_, n);  // a compare or an add per window element
  if (is_depthwise_convolution(g_, n)) return 2 * depthwise_window(g_, n);  // multiply, add
  if (is_upsample(g_, n)) return upsample_reads(g_, n);  // a weighted read per element read
  return index_tensor_args(g_, n).empty() ? 0 : 1;  // index ops move data; a gather loads an index
}

// What evaluating `v` once more costs (Note [Recompute or realize]): the weights of the values
// inlined into it, each counted once.
int Scheduler::cost(ValueId v, std::vector<int>& weights) const {
  int total = 0;
  walk_inlined(
      v, [](ValueId) { return true; },
      [&](ValueId u) {
        if (weights[u] < 0) weights[u] = weight(u);
        total += weights[u];
      });
  return total;
}

// Whether `v` is computed from values much smaller than itself (Note [Recompute or realize]): every
// value in memory that its inlined expression reads has at most 1/kGeneratedRatio of its
// elements (the gradient of a loss, where(arange == target, -w/N, 0), from the targets).
// Computing it again reads almost nothing; realizing it writes it and reads it back.
constexpr int64_t kGeneratedRatio = 64;
bool Scheduler::generated(ValueId v) const {
  const int64_t n = hint_numel(g_.type(v).sizes, g_.symbols);
  return walk_inlined(
      v, [&](ValueId u) { return hint_numel(g_.type(u).sizes, g_.symbols) * kGeneratedRatio <= n; },
      [](ValueId) {});
}

// Elements below which an offender read by broadcast is realized before its readers.
constexpr int64_t kMaxBroadcastRealize = 1 << 16;

// Values whose inlining the cost rule rejects, outermost first: those not inlined into another
// offender (realizing an outer one often makes the inner ones single-use).
std::vector<ValueId> Scheduler::violators(const std::vector<std::pair<int, Use>>& uses) const {
  std::map<ValueId, std::set<std::pair<int, std::string>>> instances;
  std::set<ValueId> broadcast;
  for (const auto& [kernel, use] : uses) {
    instances[use.value].emplace(kernel, use.key);
    if (use.broadcast) broadcast.insert(use.value);
  }
  std::vector<int> weights(g_.values.size(), -1);
  std::set<ValueId> bad;
  for (const auto& [v, inst] : instances) {
    if ((inst.size() > 1 || broadcast.count(v)) && cost(v, weights) > kMaxRecomputeCost &&
        (cost(v, weights) > kMaxGeneratedCost || !generated(v))) {
      bad.insert(v);
    }
  }
  // Readers of each value among inlined values.
  std::vector<std::vector<ValueId>> readers(g_.values.size());
  for (const graph::Node& n : g_.nodes) {
    for (ValueId u : all_reads(n)) {
      for (ValueId o : n.outputs) readers[u].push_back(o);
    }
  }
  // Offenders read by broadcast (a per-channel rsqrt(var + eps) read per element) first, alone:
  // they are small, and once realized their readers often cost little (batch norm's
  // (x - mean) * invstd, which otherwise is realized whole, a full-size tensor).
  std::vector<ValueId> out;
  for (ValueId v : bad) {
    if (broadcast.count(v) && hint_numel(g_.type(v).sizes, g_.symbols) < kMaxBroadcastRealize)
      out.push_back(v);
  }
  if (!out.empty()) return out;
  for (ValueId v : bad) {
    // Inner: every use of v goes through another offender (inlined values only in between), so
    // realizing those may leave v one instance. A use that reaches a realized value without an
    // offender on the way stays when they are realized: v is realized now. (A chain of sums,
    // the gradient of a residual stream, is one offender per link, each read by its layer's
    // kernels and by the next link: one link per round would run out of rounds.)
    std::vector<ValueId> stack = readers[v];
    std::set<ValueId> seen;
    bool through_offender = false, direct = false;
    while (!stack.empty() && !direct) {
      ValueId w = stack.back();
      stack.pop_back();
      if (!seen.insert(w).second) continue;
      if (bad.count(w)) {
        through_offender = true;
        continue;
      }
      if (realized(w) && !is_view(w)) {
        direct = true;
        continue;
      }
      for (ValueId r : readers[w]) stack.push_back(r);
    }
    if (direct || !through_offender) out.push_back(v);
  }
  return out;
}

// Note [Stored prologues]
// A pre-norm transformer adds each sublayer's output to the residual stream and normalizes the
// sum: `h = h + attn(x)`, `rms_norm(h)`. The sum is needed twice (by the norm and by the next
// residual add), so it is stored, by a pointwise kernel of its own, and the norm's kernel reads it
// back: Phi3Small's bf16 inference has 16 such pairs, each writing a 32 MiB f32 sum and reading
// it again. Inductor stores the sum from the norm's kernel. Here, with
// ScheduleOptions::stored_prologues, when a reduction comes while the open pointwise kernel of its
// input's shape stores values the reduction's prologue reads (the sum; sometimes also `sum^2`,
// realized by the cost rule), nothing waits on that kernel, and computing those values inline
// (pointwise ops, with what they inline) and the rest of the input costs at most kMaxPrologueCost:
// the open kernel is dropped, the prologue computes the values inline
// (KernelBuilder::compute_inline) and the reduction's kernel stores them as its first epilogues
// (in the pass after the reduction; with the row in registers, one pass). Before anything reads
// them again the kernel has run: a reader between the add and the norm would have closed the open
// kernel, and later readers come after this kernel. On by default (EMBER_STORED_PROLOGUES=0 turns
// it off): each such pair saves a write and a read of the sum.
std::vector<ValueId> Scheduler::stored_prologue(int32_t reduction, const KernelBuilder* open,
                                                bool nothing_pending) const {
  if (!options_.stored_prologues || !options_.reduction_fusion || open == nullptr ||
      !nothing_pending) {
    return {};
  }
  const graph::Node& n = g_.nodes[reduction];
  std::optional<ReductionSpec> spec = analyze_reduction(g_, n, /*coalesce=*/false);
  if (!spec || g_.type(spec->x.value).sizes != open->shape() || !supports_reduction_fusion(g_, n)) {
    return {};
  }
  // What computing the stored values inline costs (their own ops and what they inline, each
  // counted once), and the rest of the input.
  std::vector<ValueId> stored = open->stored_values();
  std::vector<int> weights(g_.values.size(), -1);
  int total = realized(spec->x.value) ? 0 : cost(spec->x.value, weights);
  for (ValueId v : stored) {
    if (node_class(v) != NodeClass::Pointwise) return {};
    for (ValueId a : tensor_args(g_.nodes[g_.values[v].node])) {
      if (std::find(stored.begin(), stored.end(), a) == stored.end()) total += cost(a, weights);
    }
    total += weight(v);
  }
  return total <= kMaxPrologueCost ? stored : std::vector<ValueId>{};
}

// Note [Held kernels]
// Pointwise values are added in graph order to the open kernel of their shape. Were a value of
// another shape to close it, an optimizer step (per parameter: the moments' update over the
// parameter's shape, the bias corrections on the step count, a scalar, then the parameter's
// update) would run as four kernels, the moments read twice. So the open kernel is held while a
// kernel of the other shape is built, and a later value of its shape opens it again (the other
// one is held in turn); Adam runs one kernel per parameter and one of scalars. Order: two kernels
// built side by side are independent until one reads a value the other stores; then the other is
// emitted first (order_held, and any extern, view or reduction that reads a held value closes it
// before it runs). A kernel with view steps waiting on it is not held.
Plan Scheduler::build(std::vector<std::pair<int, Use>>* uses, std::vector<ValueId>* found) {
  Plan plan;
  std::unique_ptr<KernelBuilder> open;
  // View steps of values the open kernel writes, run right after it.
  std::vector<PlanStep> pending;
  std::set<ValueId> pending_values;
  // Or the open reduction kernel (at most one of the two is open).
  std::optional<ReductionGroupBuilder> open_reduction;
  // A pointwise kernel set aside while a kernel of another shape is built (Note [Held kernels]):
  // values of its shape that come after that kernel join it again.
  std::unique_ptr<KernelBuilder> held;
  auto stores_open = [&](ValueId v) {
    return (open && open->stores(v)) || (open_reduction && open_reduction->stores(v));
  };
  auto emit = [&](KernelGroup group, const std::vector<Use>& group_uses) {
    int gi = static_cast<int>(plan.groups.size());
    plan.groups.push_back(std::move(group));
    for (const Use& u : group_uses) uses->emplace_back(gi, u);
    plan.steps.push_back({PlanStep::Kind::Kernel, gi});
  };
  auto close_held = [&] {
    if (!held) return;
    emit(held->finish("k" + std::to_string(plan.groups.size()), options_), held->uses());
    held.reset();
  };
  auto close = [&] {
    close_held();  // it runs first: the open kernel reads none of its values
    if (!open && !open_reduction) return;
    const std::string name = "k" + std::to_string(plan.groups.size());
    emit(open ? open->finish(name, options_) : open_reduction->finish(name, options_),
         open ? open->uses() : open_reduction->uses());
    open.reset();
    open_reduction.reset();
    plan.steps.insert(plan.steps.end(), pending.begin(), pending.end());
    pending.clear();
    pending_values.clear();
  };
  // The held kernel must run before the open one once that reads a value it stores.
  auto order_held = [&] {
    if (!held || !open) return;
    for (ValueId in : open->inputs()) {
      if (held->stores(in)) {
        close_held();
        return;
      }
    }
  };
  auto visit = [&](const int32_t ni) {
    const graph::Node& n = g_.nodes[ni];
    switch (cls_[ni]) {
      case NodeClass::Extern: {
        // An extern that reads a value of the open (or held) kernel must run after it.
        bool reads_open = false, reads_held = false;
        for (ValueId v : all_reads(n)) {
          reads_open |= stores_open(v) || pending_values.count(v) > 0;
          reads_held |= held && held->stores(v);
        }
        if (reads_open) close();
        if (reads_held) close_held();
        plan.steps.push_back({PlanStep::Kind::Extern, ni});
        break;
      }
      case NodeClass::ViewStep: {
        // Only makes tensors aliasing its root, and kernels read through views: a view of a value
        // of the open kernel waits for it instead of closing it.
        PlanStep step{PlanStep::Kind::View, ni, view_root(n.outputs[0])};
        if (held && held->stores(step.root)) close_held();
        if (stores_open(step.root)) {
          pending.push_back(step);
          pending_values.insert(n.outputs.begin(), n.outputs.end());
        } else {
          plan.steps.push_back(step);
        }
        break;
      }
      case NodeClass::Reduction: {
        if (!live_[ni]) break;
        std::vector<ValueId> outputs;
        for (ValueId o : n.outputs) {
          if (read_live_[o]) outputs.push_back(o);
        }
        if (open_reduction && pending.empty()) {
          // A sibling over the same space joins the open kernel (Note [Sibling reductions]),
          // when its input is cheap enough to compute in the same pass.
          std::optional<ReductionSpec> spec = analyze_reduction(g_, n, /*coalesce=*/false);
          std::vector<int> weights(g_.values.size(), -1);
          if (spec && (realized(spec->x.value) || prologue_input(n) == spec->x.value) &&
              (realized(spec->x.value) ||
               cost(spec->x.value, weights) <= kMaxSinglePassPrologueCost) &&
              open_reduction->add_sibling(ni, outputs)) {
            break;
          }
        }
        if (std::vector<ValueId> v = stored_prologue(ni, open.get(), pending.empty()); !v.empty()) {
          ReductionGroupBuilder trial(*this, ni, outputs, options_.reduction_fusion, v);
          if (trial.absorbed()) {
            close_held();
            open.reset();  // its values are stored by the reduction's kernel instead
            open_reduction.emplace(std::move(trial));
            break;
          }
        }
        close();
        open_reduction.emplace(*this, ni, std::move(outputs), options_.reduction_fusion);
        if (open_reduction->has_prologue()) {
          // Computed once per pass over the row: only cheap inputs are (kMaxPrologueCost), or
          // less cheap ones where the kernel makes one pass (kMaxSinglePassPrologueCost).
          std::vector<int> weights(g_.values.size(), -1);
          const int most = takes_siblings(g_, n) ? kMaxSinglePassPrologueCost : kMaxPrologueCost;
          if (cost(open_reduction->input(), weights) > most) {
            // Realize the computed value (a view of it is then read through, as any view).
            throw TooManyInstances{view_root(open_reduction->input())};
          }
        }
        break;
      }
      case NodeClass::Scatter: {
        // Reads only realized values (its arguments are needed) and writes one: its own group.
        if (!live_[ni]) break;
        close();
        int gi = static_cast<int>(plan.groups.size());
        KernelGroup& group = plan.groups.emplace_back();
        group.nodes.push_back(ni);
        for (ValueId v : all_reads(n)) {
          if (std::find(group.inputs.begin(), group.inputs.end(), v) == group.inputs.end()) {
            group.inputs.push_back(v);
          }
        }
        group.outputs.push_back(n.outputs[0]);
        build_scatter_kernel(g_, n, group, "k" + std::to_string(gi), options_);
        plan.steps.push_back({PlanStep::Kind::Kernel, gi});
        break;
      }
      case NodeClass::Pointwise:
      case NodeClass::Compute: {
        ValueId v = n.outputs[0];
        if (!stored_[v]) break;
        if (open_reduction) {
          if (open_reduction->add_epilogue(v)) break;
          close();
        }
        const graph::Dims& shape = g_.type(v).sizes;
        if (open && open->shape() != shape && held && held->shape() == shape) {
          // Back to the held kernel's shape: it is open again, and the open one is held in turn
          // (or, with view steps waiting on it, runs now). Whichever later reads the other's
          // values runs second (order_held).
          std::unique_ptr<KernelBuilder> resumed = std::move(held);
          if (pending.empty() && !open_reduction) {
            held = std::move(open);
          } else {
            close();
          }
          open = std::move(resumed);
        } else if (open && open->shape() != shape && pending.empty() && !open_reduction) {
          close_held();
          held = std::move(open);  // set aside: later values of its shape may join it
        }
        if (open && (open->shape() != shape || !open->add_store(v))) close();
        if (!open) {
          open = std::make_unique<KernelBuilder>(*this, shape);
          bool ok = open->add_store(v);
          EMBER_INTERNAL_ASSERT(ok) << "value %" << v << " conflicts with an empty kernel";
        }
        order_held();
        break;
      }
      case NodeClass::View:
        break;
    }
  };
  for (const int32_t ni : order_) {
    for (;;) {
      try {
        visit(ni);
        break;
      } catch (const TooManyInstances& e) {
        // Realized from now on. The kernels open now may have inlined it: dropped, as the whole
        // plan of this pass is, whose later kernels see the value realized as the next pass's will.
        realize_found(e.value, found);
        open.reset();
        held.reset();
        open_reduction.reset();
        pending.clear();
        pending_values.clear();
      }
    }
  }
  close();
  std::set<int32_t> fused;
  for (const KernelGroup& group : plan.groups) fused.insert(group.nodes.begin(), group.nodes.end());
  plan.num_fused_nodes = static_cast<int>(fused.size());
  return plan;
}

Plan Scheduler::run() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  cls_.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
    cls_.push_back(classify(g_, i, options_));
    view_node_.push_back(cls_.back() == NodeClass::View);
  }
  find_demands();
  find_order();
  const Clock::time_point t1 = Clock::now();
  int builds = 0, instance_retries = 0;
  for (int round = 0;; ++round) {
    std::vector<std::pair<int, Use>> uses;
    std::vector<ValueId> found;
    Plan plan;
    ++builds;
    try {
      plan = build(&uses, &found);
    } catch (const TooManyInstances& e) {  // while closing the last kernels
      realize_found(e.value, &found);
    }
    if (!found.empty()) {  // the pass's plan is not one: again, with them realized
      ++instance_retries;
      --round;
      continue;
    }
    std::vector<ValueId> bad = violators(uses);
    if (bad.empty() || round == kMaxCostRounds) {
      const Clock::time_point t2 = Clock::now();
      plan.phase_seconds.emplace_back("schedule/analyze",
                                      std::chrono::duration<double>(t1 - t0).count());
      plan.phase_seconds.emplace_back("schedule/build x" + std::to_string(builds) + " (" +
                                          std::to_string(instance_retries) +
                                          " for instance limits)",
                                      std::chrono::duration<double>(t2 - t1).count());
      return plan;
    }
    for (ValueId v : bad) stored_[v] = true;
  }
}

}  // namespace

Plan schedule_graph(const graph::Graph& g, const ScheduleOptions& options) {
  Plan plan = Scheduler(g, options).run();
  if (!options.combo_kernels) return plan;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, double>> phases = std::move(plan.phase_seconds);
  plan = combine_kernels(g, std::move(plan));
  phases.emplace_back("schedule/combo",
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  plan.phase_seconds = std::move(phases);
  return plan;
}

PlanUses plan_uses(const graph::Graph& g, const Plan& plan) {
  PlanUses u;
  u.readers.resize(g.values.size());
  u.producer.assign(g.values.size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& ps = plan.steps[s];
    std::vector<ValueId> reads, writes;
    switch (ps.kind) {
      case PlanStep::Kind::Kernel:
        reads = plan.groups[ps.index].inputs;
        writes = plan.groups[ps.index].outputs;
        break;
      case PlanStep::Kind::Extern:
        reads = all_reads(g.nodes[ps.index]);
        writes = g.nodes[ps.index].outputs;
        break;
      case PlanStep::Kind::View:
        reads = {ps.root};
        writes = g.nodes[ps.index].outputs;
        break;
    }
    for (ValueId v : reads) u.readers[v].push_back(static_cast<int>(s));
    for (ValueId v : writes) u.producer[v] = static_cast<int>(s);
  }
  for (ValueId v : g.outputs) u.readers[v].push_back(-1);
  for (const graph::Mutation& m : g.mutations) u.readers[m.value].push_back(-1);
  return u;
}

std::vector<std::vector<ValueId>> private_outputs(const graph::Graph& g, const Plan& plan) {
  const PlanUses u = plan_uses(g, plan);
  std::vector<std::vector<ValueId>> out(plan.groups.size());
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    for (ValueId v : plan.groups[gi].outputs) {
      if (u.readers[v].empty()) out[gi].push_back(v);
    }
  }
  return out;
}

}  // namespace ember::sched
