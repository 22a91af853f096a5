#include <algorithm>
#include <functional>
#include <optional>

#include "loop/equality.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/traverse.h"
#include "sched/fusion_internal.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/size_expr.h"
#include "support/error.h"
#include "sym/range.h"

namespace ember::sched::fusion_detail {

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
    if (t.sizes[d] == graph::DimExpr(1)) continue;
    off = off + index[d] * dim_expr(t.strides[d]);
  }
  return off;
}

// `index` (of a tensor of sizes `out`) broadcast to an operand of sizes `in`: right-aligned, size-1
// dims read element 0.
Index broadcast(const Index& index, const graph::Dims& in) {
  Index r(in.size());
  const size_t off = index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    r[d] = in[d] == graph::DimExpr(1) ? loop::idx(0) : index[d + off];
  }
  return r;
}

// An element of an index tensor (i64 or i32) as an i64 index.
Expr as_index(Expr e) {
  return e.dtype() == loop::DType::Int64 ? e : loop::Cast::make(loop::DType::Int64, std::move(e));
}

namespace {

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

}  // namespace

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

// ---- KernelBuilder ------------------------------------------------------------------------------

KernelBuilder::KernelBuilder(const FusionState& s, graph::Dims shape)
    : s_(s), g_(s.graph()), shape_(std::move(shape)) {
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (std::optional<int64_t> c = shape_[d].as_constant()) {
      bounds_[loop_var(d)] = loop::Interval::range(0, std::max<int64_t>(*c - 1, 0));
    } else {  // what the symbols' ranges allow, for every size: never the hints
      const sym::Range r = sym::range_of(shape_[d].expr(), g_.symbols);
      loop::Interval i{0, std::nullopt};
      if (r.hi != sym::Range::kPosInf) i.hi = std::max<int64_t>(r.hi - 1, 0);
      bounds_[loop_var(d)] = i;
    }
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
    r.push_back(is_one(d) ? loop::idx(0) : loop::var(loop_var(d)));
  }
  return r;
}

std::string KernelBuilder::key(ValueId v, const Index& index) const {
  std::string k = std::to_string(v) + "@";
  for (const Expr& e : index) k += loop::print_expr(e) + ",";
  return k;
}

Expr KernelBuilder::load(ValueId buffer_value, const graph::TensorType& geometry,
                         const Index& index, const graph::DimExpr& base_offset) {
  add_input(buffer_value);
  Expr off = loop::simplify(
      dim_expr(geometry.storage_offset - base_offset) + offset_of(geometry, index), bounds_);
  auto bound = bound_.find(buffer_value);
  if (bound != bound_.end() && !loop::structurally_equal(off, bound->second)) conflict_ = true;
  return loop::Load::make(*to_loop_dtype(geometry.dtype), value_buffer(buffer_value), off);
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
      return load(root, t, index, g_.type(root).storage_offset);
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
  if (s_.realized(v) && inline_.count(v) == 0) {
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
    return load(v, t, index, t.storage_offset);
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
    use.broadcast |= is_loop(d) && !used.count(loop_var(d));
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
      in.push_back(element(u, broadcast(index, g_.type(u).sizes), false));
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
  if (stores(root) || bound_.count(root)) {  // the check before the loops would read it first
    conflict_ = true;
    return loop::idx(0);
  }
  const Expr bound = loop::simplify(size);  // a constant, or over size variables
  IndexCheck check{v, bound, negative_wraps};
  if (!s_.index_asserts() &&
      std::find(st_.checks.begin(), st_.checks.end(), check) == st_.checks.end()) {
    st_.checks.push_back(check);
  }
  const graph::TensorType& t = g_.type(v);
  Expr x = as_index(load(root, t, simplified(raw_index), g_.type(root).storage_offset));
  if (s_.index_asserts()) {  // each read checks itself (ScheduleOptions::index_asserts)
    x = loop::Call::make(
        loop::CallFn::CheckIndex,
        {x, negative_wraps ? loop::simplify(loop::idx(0) - bound) : loop::idx(0), bound});
  }
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

void KernelBuilder::bind_reads(ValueId v, const Expr& offset) {
  bound_[v] = loop::simplify(offset, bounds_);
}

std::vector<std::pair<ValueId, ValueId>> KernelBuilder::reusable_inputs(const Stmt& body) const {
  // Every index each buffer is loaded at.
  std::map<std::string, std::vector<Expr>> loads;
  std::function<void(const Expr&)> walk = [&](const Expr& e) {
    if (const auto* l = e.as<loop::Load>()) loads[l->buffer].push_back(l->index);
    loop::for_each_child(e, walk);
  };
  std::function<void(const Stmt&)> walk_stmt = [&](const Stmt& s) {
    loop::for_each_stmt_child(s, walk, walk_stmt);
  };
  walk_stmt(body);
  std::vector<std::pair<ValueId, ValueId>> out;
  std::set<ValueId> taken;
  const Index id = identity();
  for (const auto& [v, var] : st_.stores) {
    const graph::TensorType& tv = g_.type(v);
    const Expr at = loop::simplify(offset_of(tv, id), bounds_);
    // The input that `v` is written back into (an optimizer's parameter, its moments) first: the
    // executor may then write `v` there directly (Executor::plan_mutation_writes).
    std::vector<ValueId> candidates;
    for (const graph::Mutation& m : g_.mutations) {
      if (m.value == v &&
          std::find(st_.inputs.begin(), st_.inputs.end(), m.input) != st_.inputs.end()) {
        candidates.push_back(m.input);
      }
    }
    candidates.insert(candidates.end(), st_.inputs.begin(), st_.inputs.end());
    for (ValueId u : candidates) {
      const graph::TensorType& tu = g_.type(u);
      if (taken.count(u) || tu.dtype != tv.dtype || tu.sizes != tv.sizes ||
          tu.strides != tv.strides) {
        continue;
      }
      bool index_tensor = false;
      for (const IndexCheck& c : st_.checks) index_tensor |= s_.view_root(c.v) == u;
      if (index_tensor) continue;
      bool own_element = true;
      for (const Expr& index : loads[value_buffer(u)]) {
        own_element &= loop::structurally_equal(index, at);
      }
      if (!own_element) continue;
      out.emplace_back(u, v);
      taken.insert(u);
      break;
    }
  }
  return out;
}

Stmt KernelBuilder::body() const {
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
  return body;
}

Stmt KernelBuilder::with_index_checks(Stmt body, KernelGroup& group) const {
  if (st_.checks.empty()) return body;
  // Every index first, serially; then the loops only when all are in range.
  add_index_status(group, group.kernel);
  std::vector<Stmt> stmts{loop::Store::make("bad", loop::idx(0), loop::bool_imm(false))};
  for (const IndexCheck& c : st_.checks) {
    const graph::TensorType& t = g_.type(c.v);
    const ValueId root = s_.view_root(c.v);
    const int64_t base = t.storage_offset.constant() - g_.type(root).storage_offset.constant();
    auto element = [&](const Index& j) {
      Expr off = loop::idx(base) + offset_of(t, j);
      return as_index(
          loop::Load::make(*to_loop_dtype(t.dtype), value_buffer(root), loop::simplify(off)));
    };
    stmts.push_back(index_range_check(t, element, c.size, c.negative_wraps, "j"));
  }
  Stmt run =
      loop::Block::make({loop::Store::make("status", loop::idx(0), loop::bool_imm(false)), body});
  stmts.push_back(
      loop::IfThenElse::make(loop::Load::make(loop::DType::Bool, "bad", loop::idx(0)),
                             loop::Store::make("status", loop::idx(0), loop::bool_imm(true)), run));
  body = loop::Allocate::make("bad", loop::DType::Bool, {loop::idx(1)},
                              loop::Block::make(std::move(stmts)));
  return body;
}

KernelGroup KernelBuilder::finish(const std::string& name, const ScheduleOptions& options) const {
  KernelGroup group;
  group.nodes.assign(st_.nodes.begin(), st_.nodes.end());
  group.inputs = st_.inputs;
  for (const auto& [v, var] : st_.stores) group.outputs.push_back(v);
  loop::Kernel& k = group.kernel;
  k.name = name;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g_, group, k);

  Stmt body = this->body();
  group.reuse = reusable_inputs(body);

  // Loop order: the innermost loop runs over the dim of the smallest stride of the first output,
  // so its writes are sequential; size-1 dims go outermost and ties keep dim order.
  const graph::TensorType& first = g_.type(st_.stores.front().first);
  const size_t rank = shape_.size();
  std::vector<size_t> order(rank);
  for (size_t d = 0; d < rank; ++d) order[d] = d;
  // Symbolic sizes and strides count at their hints: the order and the loop kinds never change
  // what the kernel computes, and every loop runs its exact extent.
  auto key_of = [&](size_t d) {
    return is_one(d) ? INT64_MAX : hint_of(first.strides[d], g_.symbols);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return key_of(a) > key_of(b); });
  // At the largest size the symbols allow, not the hints (Note [Parallel loops over symbols]).
  const int64_t numel = largest_numel(shape_, g_.symbols);
  // The parallel loop: the outermost of extent > 1.
  std::optional<size_t> parallel;
  if (numel >= options.parallel_threshold) {
    for (size_t d : order) {
      if (is_loop(d)) {
        parallel = d;
        break;
      }
    }
  }
  for (size_t pos = rank; pos-- > 0;) {
    size_t d = order[pos];
    loop::ForKind kind = pos + 1 == rank ? loop::ForKind::Vectorized : loop::ForKind::Serial;
    loop::Expr when;
    if (parallel == d) {
      kind = loop::ForKind::Parallel;
      when = parallel_when(graph::sym_numel(shape_), options.parallel_threshold, g_.symbols);
    }
    body = loop::For::make(loop::var(loop_var(d)), loop::idx(0), dim_expr(shape_[d]), kind, body,
                           when);
  }

  body = with_index_checks(std::move(body), group);

  std::map<std::string, std::string> names;
  for (const auto& [v, buf] : buffer_of) names[value_buffer(v)] = buf;
  k.body = rename_buffers(body, names);
  k.size_vars = kernel_size_vars(k, g_.symbols);
  return group;
}

}  // namespace ember::sched::fusion_detail
