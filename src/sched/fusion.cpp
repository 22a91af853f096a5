#include "sched/fusion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "loop/equality.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/traverse.h"
#include "sched/index_ops.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/reduction.h"
#include "sched/scatter.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;
using loop::Expr;
using loop::Stmt;

// Note [Recompute or realize]
// A value that is not realized is inlined into every read of it, at the index of that read. When
// a kernel reads it at several different indices, or at an index that ignores a loop of the
// kernel (a broadcast), or several kernels read it, it is computed more than once per element.
// That is fine for cheap values: a cast, an add, a view. A value whose inlined expression costs
// more than kMaxRecomputeCost (an op counts 1, a transcendental call such as exp or tanh counts 5,
// views and data movement count 0, summed over the inlined producers) is realized instead: a
// kernel of its own shape writes it once and the readers load it.
constexpr int kMaxRecomputeCost = 3;
constexpr int kTranscendentalCost = 5;
// Rounds of the cost rule (each realizes the outermost offenders and rebuilds the plan).
constexpr int kMaxCostRounds = 16;
// Instances of one value in one kernel beyond which it is realized at once, whatever its cost:
// inlining at many indices can grow exponentially (x.roll(1) + x, repeated), so the rounds of the
// cost rule must not wait for a complete plan.
constexpr int kMaxInstances = 16;

// Thrown while building when a value exceeds kMaxInstances in one kernel.
struct TooManyInstances {
  graph::ValueId value;
};

// ViewStep: a view that something outside the kernels needs; a PlanStep::Kind::View step.
// Scatter: a write at indexed positions (scatter.h), a one-node kernel group like Reduction.
enum class NodeClass : uint8_t { Extern, Reduction, Pointwise, View, Compute, ViewStep, Scatter };

// Every tensor value a node reads, in argument order (ValueRefs only).
std::vector<ValueId> tensor_args(const graph::Node& n) {
  std::vector<ValueId> out;
  for (const graph::Arg& a : n.args) {
    if (auto* r = std::get_if<graph::ValueRef>(&a)) out.push_back(r->id);
  }
  return out;
}

std::vector<ValueId> all_reads(const graph::Node& n) {
  std::vector<ValueId> out;
  for (const graph::Arg& a : n.args) {
    if (auto* r = std::get_if<graph::ValueRef>(&a)) out.push_back(r->id);
    if (auto* l = std::get_if<graph::ValueList>(&a)) {
      for (const auto& item : l->items) {
        if (item) out.push_back(*item);
      }
    }
  }
  return out;
}

// A value a kernel can compute or read: on the CPU, with a loop-IR dtype and constant sizes.
bool kernel_value(const graph::Graph& g, ValueId v) {
  const graph::TensorType& t = g.type(v);
  return t.device.kind == graph::DeviceKind::CPU && to_loop_dtype(t.dtype) && t.is_static();
}

NodeClass classify(const graph::Graph& g, const graph::Node& n, const ScheduleOptions& options) {
  if (!options.fuse) return NodeClass::Extern;
  if (options.reductions && is_reduction_kernel_node(g, n)) return NodeClass::Reduction;
  for (ValueId v : n.outputs) {
    if (!kernel_value(g, v)) return NodeClass::Extern;
  }
  for (ValueId v : all_reads(n)) {
    if (!kernel_value(g, v)) return NodeClass::Extern;
  }
  if (is_scatter_kernel_node(g, n)) return NodeClass::Scatter;
  if (n.outputs.size() == 1 && is_pointwise(g, n)) return NodeClass::Pointwise;
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

// The kernel's loop variable of dim `d`.
std::string loop_var(size_t d) {
  return "i" + std::to_string(d);
}
// A buffer name used while building, replaced by buf<k> at the end.
std::string value_buffer(ValueId v) {
  return "v" + std::to_string(v);
}

// The flat offset of `index` in a tensor of type `t` (dims of size 1 contribute nothing: their
// index is 0).
Expr offset_of(const graph::TensorType& t, const Index& index) {
  Expr off = loop::idx(0);
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d].constant() == 1) continue;
    off = off + index[d] * loop::idx(t.strides[d].constant());
  }
  return off;
}

// `index` (of a tensor of sizes `out`) broadcast to an operand of sizes `in`: right-aligned, size-1
// dims read element 0.
Index broadcast(const Index& index, const std::vector<int64_t>& in) {
  Index r(in.size());
  const size_t off = index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) r[d] = in[d] == 1 ? loop::idx(0) : index[d + off];
  return r;
}

// An element of an index tensor (i64 or i32) as an i64 index.
Expr as_index(Expr e) {
  return e.dtype() == loop::DType::Int64 ? e : loop::Cast::make(loop::DType::Int64, std::move(e));
}

void collect_vars(const Expr& e, std::set<std::string>& out) {
  if (const auto* v = e.as<loop::Var>()) out.insert(v->name);
  loop::for_each_child(e, [&](const Expr& c) { collect_vars(c, out); });
}

bool is_transcendental(loop::CallFn fn) {
  switch (fn) {
    case loop::CallFn::Abs:
    case loop::CallFn::Neg:
    case loop::CallFn::Floor:
    case loop::CallFn::Ceil:
    case loop::CallFn::Round:
    case loop::CallFn::Trunc:
    case loop::CallFn::IsNan:
    case loop::CallFn::IsInf:
    case loop::CallFn::Reciprocal:
    case loop::CallFn::Sqrt:
    case loop::CallFn::Rsqrt:
      return false;
    default:
      return true;
  }
}

// What evaluating `e` once costs (Note [Recompute or realize]): each arithmetic, comparison,
// logical or select node 1, each call 1 or kTranscendentalCost; casts, loads and constants 0.
int expression_cost(const Expr& e) {
  int cost = 0;
  std::function<void(const Expr&)> walk = [&](const Expr& x) {
    switch (x.kind()) {
      case loop::ExprKind::IntImm:
      case loop::ExprKind::FloatImm:
      case loop::ExprKind::Var:
      case loop::ExprKind::SizeVar:
      case loop::ExprKind::Cast:
      case loop::ExprKind::Load:
        break;
      case loop::ExprKind::Call:
        cost += is_transcendental(x.as<loop::Call>()->fn) ? kTranscendentalCost : 1;
        break;
      default:
        cost += 1;
        break;
    }
    loop::for_each_child(x, walk);
  };
  walk(e);
  return cost;
}

Expr rename_buffers(const Expr& e, const std::map<std::string, std::string>& names) {
  Expr r = loop::map_children(e, [&](const Expr& c) { return rename_buffers(c, names); });
  if (const auto* l = r.as<loop::Load>()) {
    auto it = names.find(l->buffer);
    if (it != names.end()) return loop::Load::make(r.dtype(), it->second, l->index);
  }
  return r;
}

Stmt rename_buffers(const Stmt& s, const std::map<std::string, std::string>& names) {
  Stmt r = loop::map_stmt_children(
      s, [&](const Expr& e) { return rename_buffers(e, names); },
      [&](const Stmt& c) { return rename_buffers(c, names); });
  if (const auto* st = r.as<loop::Store>()) {
    auto it = names.find(st->buffer);
    if (it != names.end()) return loop::Store::make(it->second, st->index, st->value);
  }
  return r;
}

// One instantiation of an inlined value in a kernel: the value at one index.
struct Use {
  ValueId value = -1;
  std::string key;         // the value and its printed index
  bool broadcast = false;  // the index ignores a loop of the kernel (extent > 1)
};

class Scheduler;

// Builds one kernel: the values it stores (one shape, the iteration space) and everything they
// inline. Reads go through element() (the ElementReader of index_ops.h).
class KernelBuilder final : public ElementReader {
 public:
  KernelBuilder(const Scheduler& s, std::vector<int64_t> shape);

  const std::vector<int64_t>& shape() const { return shape_; }
  bool stores(ValueId v) const {
    for (const auto& [sv, var] : st_.stores) {
      if (sv == v) return true;
    }
    return false;
  }
  /// Adds realized value `v` (of this kernel's shape) as an output. Returns false, changing
  /// nothing, when `v` reads a value this kernel stores at another index than its own, or uses one
  /// as an index tensor: that value must be written by an earlier kernel.
  bool add_store(ValueId v);
  /// The group: inputs, outputs, nodes and the loop-IR kernel named `name`.
  KernelGroup finish(const std::string& name, const ScheduleOptions& options) const;
  const std::vector<Use>& uses() const { return st_.uses; }

  Expr element(ValueId v, const Index& index, bool guarded) override;
  Expr index_element(ValueId v, const Index& index, const Expr& size, bool negative_wraps) override;

 private:
  struct IndexCheck {
    ValueId v;
    int64_t size;
    bool negative_wraps;
    bool operator==(const IndexCheck&) const = default;
  };
  struct State {
    std::vector<std::pair<Expr, Expr>> lets;  // (var, value), in order
    std::map<std::string, Expr> memo;         // "value@index" -> let var
    std::map<ValueId, int> num_lets;          // per value, for naming
    std::map<ValueId, int> num_instances;     // per value, instantiations (see kMaxInstances)
    std::vector<ValueId> inputs;              // realized values read, in first-use order
    std::vector<std::pair<ValueId, Expr>> stores;
    std::vector<IndexCheck> checks;
    std::set<int32_t> nodes;
    std::vector<Use> uses;
  };

  Index simplified(const Index& index) const;
  Index identity() const;
  std::string key(ValueId v, const Index& index) const;
  Expr load(ValueId buffer_value, const graph::TensorType& geometry, const Index& index,
            int64_t base_offset);
  Expr define(ValueId v, const Index& index);
  void add_input(ValueId v) {
    if (std::find(st_.inputs.begin(), st_.inputs.end(), v) == st_.inputs.end()) {
      st_.inputs.push_back(v);
    }
  }

  const Scheduler& s_;
  const graph::Graph& g_;
  std::vector<int64_t> shape_;
  loop::VarBounds bounds_;
  State st_;
  bool conflict_ = false;
  int guard_depth_ = 0;
};

class Scheduler {
 public:
  Scheduler(const graph::Graph& g, const ScheduleOptions& options) : g_(g), options_(options) {}

  Plan run();

  const graph::Graph& graph() const { return g_; }
  NodeClass node_class(ValueId v) const {
    int32_t n = g_.values[v].node;
    return n < 0 ? NodeClass::Extern : cls_[n];
  }
  /// Lives in memory: a graph input, the output of an extern, reduction or view step, or a
  /// kernel output.
  bool realized(ValueId v) const {
    NodeClass c = node_class(v);
    return c == NodeClass::Extern || c == NodeClass::Reduction || c == NodeClass::ViewStep ||
           c == NodeClass::Scatter || stored_[v];
  }
  /// An output of a view node the kernels read through: a fusible view, or one that is also a
  /// view step because something outside the kernels needs it.
  bool is_view(ValueId v) const {
    int32_t n = g_.values[v].node;
    return n >= 0 && view_node_[n];
  }
  /// The value a view aliases at the end of its chain of views: the first value that is not a
  /// view's output.
  ValueId view_root(ValueId v) const {
    while (is_view(v)) v = view_input(g_, g_.nodes[g_.values[v].node]);
    return v;
  }

 private:
  void find_demands();
  Plan build(std::vector<std::pair<int, Use>>* uses);
  int cost(ValueId v, std::vector<int>& weights) const;
  std::vector<ValueId> violators(const std::vector<std::pair<int, Use>>& uses) const;

  const graph::Graph& g_;
  ScheduleOptions options_;
  std::vector<NodeClass> cls_;   // per node
  std::vector<bool> view_node_;  // per node: a view op kernels read through (see is_view)
  std::vector<bool> live_;       // per node: its values are needed
  std::vector<bool> stored_;     // per value: written by a kernel
  std::vector<bool> read_live_;  // per value: read by a live node, an output or a mutation
};

// ---- KernelBuilder ------------------------------------------------------------------------------

KernelBuilder::KernelBuilder(const Scheduler& s, std::vector<int64_t> shape)
    : s_(s), g_(s.graph()), shape_(std::move(shape)) {
  for (size_t d = 0; d < shape_.size(); ++d) {
    bounds_[loop_var(d)] = loop::Interval::range(0, std::max<int64_t>(shape_[d] - 1, 0));
  }
}

Index KernelBuilder::simplified(const Index& index) const {
  Index r;
  for (const Expr& e : index) r.push_back(loop::simplify(e, bounds_));
  return r;
}

Index KernelBuilder::identity() const {
  Index r;
  for (size_t d = 0; d < shape_.size(); ++d) {
    r.push_back(shape_[d] == 1 ? loop::idx(0) : loop::var(loop_var(d)));
  }
  return r;
}

std::string KernelBuilder::key(ValueId v, const Index& index) const {
  std::string k = std::to_string(v) + "@";
  for (const Expr& e : index) k += loop::print_expr(e) + ",";
  return k;
}

Expr KernelBuilder::load(ValueId buffer_value, const graph::TensorType& geometry,
                         const Index& index, int64_t base_offset) {
  add_input(buffer_value);
  Expr off =
      loop::idx(geometry.storage_offset.constant() - base_offset) + offset_of(geometry, index);
  return loop::Load::make(*to_loop_dtype(geometry.dtype), value_buffer(buffer_value),
                          loop::simplify(off, bounds_));
}

Expr KernelBuilder::element(ValueId v, const Index& raw_index, bool guarded) {
  Index index = simplified(raw_index);
  const graph::TensorType& t = g_.type(v);
  if (s_.is_view(v)) {
    const int32_t ni = g_.values[v].node;
    const graph::Node& n = g_.nodes[ni];
    // A view of a realized buffer reads it at the view's traced geometry, relative to the buffer.
    ValueId root = s_.view_root(v);
    if (s_.realized(root) && !stores(root)) {
      st_.nodes.insert(ni);
      return load(root, t, index, g_.type(root).storage_offset.constant());
    }
    if (needs_realized_input(g_, n)) {  // its root is realized: written by this kernel
      EMBER_INTERNAL_ASSERT(stores(root)) << "as_strided of a value that is not realized";
      conflict_ = true;
      return loop::Load::make(*to_loop_dtype(t.dtype), value_buffer(v), loop::idx(0));
    }
    st_.nodes.insert(ni);
    guard_depth_ += guarded;
    Expr e = lower_index_op(g_, n, v, index, *this);
    guard_depth_ -= guarded;
    return e;
  }
  if (s_.realized(v)) {
    if (stores(v)) {
      // Written by this kernel: readable only at its own index, where it is a let.
      Index id = identity();
      bool same = index.size() == id.size();
      for (size_t d = 0; same && d < index.size(); ++d) {
        same = loop::structurally_equal(index[d], id[d]);
      }
      if (same) {
        for (const auto& [sv, var] : st_.stores) {
          if (sv == v) return var;
        }
      }
      conflict_ = true;
      return loop::Load::make(*to_loop_dtype(t.dtype), value_buffer(v), loop::idx(0));
    }
    return load(v, t, index, t.storage_offset.constant());
  }
  guard_depth_ += guarded;
  Expr e = define(v, index);
  guard_depth_ -= guarded;
  return e;
}

// The value of computed (pointwise or index-op) value `v` at `index`: a let when unguarded,
// memoized per index.
Expr KernelBuilder::define(ValueId v, const Index& index) {
  const std::string k = key(v, index);
  auto it = st_.memo.find(k);
  if (it != st_.memo.end()) return it->second;
  Use use{v, k, false};
  std::set<std::string> used;
  for (const Expr& e : index) collect_vars(e, used);
  for (size_t d = 0; d < shape_.size(); ++d) {
    use.broadcast |= shape_[d] > 1 && !used.count(loop_var(d));
  }
  st_.uses.push_back(use);
  if (++st_.num_instances[v] > kMaxInstances && !s_.realized(v)) throw TooManyInstances{v};
  const int32_t ni = g_.values[v].node;
  const graph::Node& n = g_.nodes[ni];
  st_.nodes.insert(ni);
  Expr value;
  if (s_.node_class(v) == NodeClass::Pointwise) {
    std::vector<Expr> in;
    for (ValueId u : tensor_args(n)) {
      in.push_back(element(u, broadcast(index, sizes_of(g_.type(u))), false));
    }
    value = lower_pointwise(g_, n, in);
  } else {
    value = lower_index_op(g_, n, v, index, *this);
  }
  value = loop::simplify(value, bounds_);
  // In one arm of a Select, the index may be out of range where the arm is not chosen: the
  // value stays inline there instead of becoming a let evaluated on every iteration.
  if (guard_depth_ > 0) return value;
  if (value.as<loop::Var>() || value.as<loop::IntImm>() || value.as<loop::FloatImm>()) {
    st_.memo[k] = value;  // nothing to compute: no let
    return value;
  }
  int count = st_.num_lets[v]++;
  std::string name = "t" + std::to_string(v) + (count ? "_" + std::to_string(count) : "");
  Expr var = loop::Var::make(name, value.dtype());
  st_.lets.emplace_back(var, value);
  st_.memo[k] = var;
  return var;
}

Expr KernelBuilder::index_element(ValueId v, const Index& raw_index, const Expr& size,
                                  bool negative_wraps) {
  // An index tensor is realized, or a view of a realized buffer (Scheduler::find_demands).
  const ValueId root = s_.view_root(v);
  EMBER_INTERNAL_ASSERT(s_.realized(root)) << "index tensor %" << v << " is not realized";
  std::optional<int64_t> bound = loop::as_const_int(size);
  EMBER_INTERNAL_ASSERT(bound.has_value()) << "index bound is not a constant";
  if (stores(root)) {  // the check before the loops would read it before it is written
    conflict_ = true;
    return loop::idx(0);
  }
  IndexCheck check{v, *bound, negative_wraps};
  if (std::find(st_.checks.begin(), st_.checks.end(), check) == st_.checks.end()) {
    st_.checks.push_back(check);
  }
  const graph::TensorType& t = g_.type(v);
  Expr x = as_index(load(root, t, simplified(raw_index), g_.type(root).storage_offset.constant()));
  if (negative_wraps) x = loop::Select::make(loop::LT::make(x, loop::idx(0)), x + size, x);
  return x;
}

bool KernelBuilder::add_store(ValueId v) {
  State saved = st_;
  conflict_ = false;
  Expr var = define(v, identity());
  if (conflict_) {
    st_ = std::move(saved);
    conflict_ = false;
    return false;
  }
  st_.stores.emplace_back(v, var);
  return true;
}

KernelGroup KernelBuilder::finish(const std::string& name, const ScheduleOptions& options) const {
  KernelGroup group;
  group.nodes.assign(st_.nodes.begin(), st_.nodes.end());
  group.inputs = st_.inputs;
  for (const auto& [v, var] : st_.stores) group.outputs.push_back(v);
  loop::Kernel& k = group.kernel;
  k.name = name;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g_, group, k);

  std::vector<Stmt> stores;
  const Index id = identity();
  for (const auto& [v, var] : st_.stores) {
    stores.push_back(loop::Store::make(value_buffer(v),
                                       loop::simplify(offset_of(g_.type(v), id), bounds_), var));
  }
  Stmt body = loop::Block::make(std::move(stores));
  for (size_t i = st_.lets.size(); i-- > 0;) {
    body = loop::Let::make(st_.lets[i].first, st_.lets[i].second, body);
  }

  // Loop order: the innermost loop runs over the dim of the smallest stride of the first output,
  // so its writes are sequential; size-1 dims go outermost and ties keep dim order.
  const graph::TensorType& first = g_.type(st_.stores.front().first);
  const size_t rank = shape_.size();
  std::vector<size_t> order(rank);
  for (size_t d = 0; d < rank; ++d) order[d] = d;
  auto key_of = [&](size_t d) { return shape_[d] == 1 ? INT64_MAX : first.strides[d].constant(); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return key_of(a) > key_of(b); });
  int64_t numel = 1;
  for (int64_t s : shape_) numel *= s;
  // The parallel loop: the outermost of extent > 1.
  std::optional<size_t> parallel;
  if (numel >= options.parallel_threshold) {
    for (size_t d : order) {
      if (shape_[d] > 1) {
        parallel = d;
        break;
      }
    }
  }
  for (size_t pos = rank; pos-- > 0;) {
    size_t d = order[pos];
    loop::ForKind kind = pos + 1 == rank ? loop::ForKind::Vectorized : loop::ForKind::Serial;
    if (parallel == d) kind = loop::ForKind::Parallel;
    body = loop::For::make(loop::var(loop_var(d)), loop::idx(0), loop::idx(shape_[d]), kind, body);
  }

  if (!st_.checks.empty()) {
    // Every index first, serially; then the loops only when all are in range.
    loop::BufferParam status;
    status.name = "status";
    status.role = loop::BufferRole::Output;
    status.dtype = loop::DType::Bool;
    status.sizes = {loop::idx(1)};
    status.strides = {loop::idx(1)};
    k.buffers.push_back(status);
    group.index_status = true;
    std::vector<Stmt> stmts{loop::Store::make("bad", loop::idx(0), loop::bool_imm(false))};
    for (const IndexCheck& c : st_.checks) {
      const graph::TensorType& t = g_.type(c.v);
      const ValueId root = s_.view_root(c.v);
      // Dims of stride 0 (expanded) hold no other elements: their loops are left out.
      std::vector<int64_t> sizes = sizes_of(t);
      Index j;
      for (size_t d = 0; d < sizes.size(); ++d) {
        bool repeats = sizes[d] == 1 || t.strides[d].constant() == 0;
        j.push_back(repeats ? loop::idx(0) : loop::var("j" + std::to_string(d)));
      }
      Expr off = loop::idx(t.storage_offset.constant() - g_.type(root).storage_offset.constant()) +
                 offset_of(t, j);
      Expr x = as_index(
          loop::Load::make(*to_loop_dtype(t.dtype), value_buffer(root), loop::simplify(off)));
      Expr lo = loop::idx(c.negative_wraps ? -c.size : 0);
      Expr ok = loop::And::make(loop::LE::make(lo, x), loop::LT::make(x, loop::idx(c.size)));
      Stmt s =
          loop::Accumulate::make(loop::ReduceOp::Any, {"bad"}, loop::idx(0), {loop::Not::make(ok)});
      for (size_t d = sizes.size(); d-- > 0;) {
        if (!j[d].as<loop::Var>()) continue;
        s = loop::For::make(j[d], loop::idx(0), loop::idx(sizes[d]), loop::ForKind::Serial, s);
      }
      stmts.push_back(s);
    }
    Stmt run =
        loop::Block::make({loop::Store::make("status", loop::idx(0), loop::bool_imm(false)), body});
    stmts.push_back(loop::IfThenElse::make(
        loop::Load::make(loop::DType::Bool, "bad", loop::idx(0)),
        loop::Store::make("status", loop::idx(0), loop::bool_imm(true)), run));
    body = loop::Allocate::make("bad", loop::DType::Bool, {loop::idx(1)},
                                loop::Block::make(std::move(stmts)));
  }

  std::map<std::string, std::string> names;
  for (const auto& [v, buf] : buffer_of) names[value_buffer(v)] = buf;
  k.body = rename_buffers(body, names);
  return group;
}

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
      for (ValueId v : all_reads(n)) need[v] = true;
    } else {
      // Index tensors and as_strided's input are read from memory, and a view step is made from
      // its root: their roots must exist.
      for (ValueId v : index_tensor_args(g_, n)) need[view_root(v)] = true;
      if (needs_realized_input(g_, n)) need[view_root(view_input(g_, n))] = true;
      if (cls_[i] == NodeClass::ViewStep) need[view_root(n.outputs[0])] = true;
    }
  }
}

// What evaluating `v` once more costs (Note [Recompute or realize]): the weights of the values
// inlined into it, each counted once.
int Scheduler::cost(ValueId v, std::vector<int>& weights) const {
  int total = 0;
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
    if (realized(u)) continue;
    const graph::Node& n = g_.nodes[g_.values[u].node];
    if (weights[u] < 0) {
      if (node_class(u) == NodeClass::Pointwise) {
        std::vector<Expr> in;
        for (ValueId a : tensor_args(n)) {
          in.push_back(
              loop::Var::make("x" + std::to_string(in.size()), *to_loop_dtype(g_.type(a).dtype)));
        }
        weights[u] = expression_cost(lower_pointwise(g_, n, in));
      } else {  // index ops move data; a gather also loads an index
        weights[u] = index_tensor_args(g_, n).empty() ? 0 : 1;
      }
    }
    total += weights[u];
    for (ValueId r : all_reads(n)) stack.push_back(r);
  }
  return total;
}

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
    if ((inst.size() > 1 || broadcast.count(v)) && cost(v, weights) > kMaxRecomputeCost) {
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
  std::vector<ValueId> out;
  for (ValueId v : bad) {
    // Is another offender reached from v through values that are inlined?
    std::vector<ValueId> stack = readers[v];
    std::set<ValueId> seen;
    bool inner = false;
    while (!stack.empty() && !inner) {
      ValueId w = stack.back();
      stack.pop_back();
      if ((realized(w) && !is_view(w)) || !seen.insert(w).second) continue;
      if (bad.count(w)) inner = true;
      for (ValueId r : readers[w]) stack.push_back(r);
    }
    if (!inner) out.push_back(v);
  }
  return out;
}

Plan Scheduler::build(std::vector<std::pair<int, Use>>* uses) {
  Plan plan;
  std::optional<KernelBuilder> open;
  // View steps of values the open kernel writes, run right after it.
  std::vector<PlanStep> pending;
  std::set<ValueId> pending_values;
  auto close = [&] {
    if (!open) return;
    int gi = static_cast<int>(plan.groups.size());
    plan.groups.push_back(open->finish("k" + std::to_string(gi), options_));
    for (const Use& u : open->uses()) uses->emplace_back(gi, u);
    plan.steps.push_back({PlanStep::Kind::Kernel, gi});
    open.reset();
    plan.steps.insert(plan.steps.end(), pending.begin(), pending.end());
    pending.clear();
    pending_values.clear();
  };
  for (int32_t ni = 0; ni < static_cast<int32_t>(g_.nodes.size()); ++ni) {
    const graph::Node& n = g_.nodes[ni];
    switch (cls_[ni]) {
      case NodeClass::Extern: {
        // An extern that reads a value of the open kernel must run after it.
        bool reads_open = false;
        for (ValueId v : all_reads(n)) {
          reads_open |= (open && open->stores(v)) || pending_values.count(v) > 0;
        }
        if (reads_open) close();
        plan.steps.push_back({PlanStep::Kind::Extern, ni});
        break;
      }
      case NodeClass::ViewStep: {
        // Only makes tensors aliasing its root, and kernels read through views: a view of a value
        // of the open kernel waits for it instead of closing it.
        PlanStep step{PlanStep::Kind::View, ni, view_root(n.outputs[0])};
        if (open && open->stores(step.root)) {
          pending.push_back(step);
          pending_values.insert(n.outputs.begin(), n.outputs.end());
        } else {
          plan.steps.push_back(step);
        }
        break;
      }
      case NodeClass::Reduction: {
        if (!live_[ni]) break;
        close();
        int gi = static_cast<int>(plan.groups.size());
        KernelGroup& group = plan.groups.emplace_back();
        group.nodes.push_back(ni);
        for (ValueId v : tensor_args(n)) {
          if (std::find(group.inputs.begin(), group.inputs.end(), v) == group.inputs.end()) {
            group.inputs.push_back(v);
          }
        }
        for (ValueId o : n.outputs) {
          if (read_live_[o]) group.outputs.push_back(o);
        }
        group.kernel = build_reduction_kernel(g_, n, group, "k" + std::to_string(gi), options_);
        plan.steps.push_back({PlanStep::Kind::Kernel, gi});
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
        std::vector<int64_t> shape = sizes_of(g_.type(v));
        if (open && (open->shape() != shape || !open->add_store(v))) close();
        if (!open) {
          open.emplace(*this, shape);
          bool ok = open->add_store(v);
          EMBER_INTERNAL_ASSERT(ok) << "value %" << v << " conflicts with an empty kernel";
        }
        break;
      }
      case NodeClass::View:
        break;
    }
  }
  close();
  std::set<int32_t> fused;
  for (const KernelGroup& group : plan.groups) fused.insert(group.nodes.begin(), group.nodes.end());
  plan.num_fused_nodes = static_cast<int>(fused.size());
  return plan;
}

Plan Scheduler::run() {
  cls_.clear();
  for (const graph::Node& n : g_.nodes) {
    cls_.push_back(classify(g_, n, options_));
    view_node_.push_back(cls_.back() == NodeClass::View);
  }
  find_demands();
  for (int round = 0;; ++round) {
    std::vector<std::pair<int, Use>> uses;
    Plan plan;
    try {
      plan = build(&uses);
    } catch (const TooManyInstances& e) {
      stored_[e.value] = true;  // at most once per value, so this terminates
      --round;
      continue;
    }
    std::vector<ValueId> bad = violators(uses);
    if (bad.empty() || round == kMaxCostRounds) return plan;
    for (ValueId v : bad) stored_[v] = true;
  }
}

}  // namespace

Plan schedule_graph(const graph::Graph& g, const ScheduleOptions& options) {
  return Scheduler(g, options).run();
}

}  // namespace ember::sched
