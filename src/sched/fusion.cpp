#include "sched/fusion.h"

#include <algorithm>
#include <map>
#include <set>

#include "loop/simplify.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/reduction.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;

// Every tensor value a node reads, in argument order (ValueRefs only: pointwise nodes take no
// tensor lists).
std::vector<ValueId> tensor_args(const graph::Node& n) {
  std::vector<ValueId> out;
  for (const graph::Arg& a : n.args) {
    if (auto* r = std::get_if<graph::ValueRef>(&a)) out.push_back(r->id);
  }
  return out;
}

std::vector<ValueId> all_reads(const graph::Node& n) {
  std::vector<ValueId> out = tensor_args(n);
  for (const graph::Arg& a : n.args) {
    if (auto* l = std::get_if<graph::ValueList>(&a)) {
      for (const auto& item : l->items) {
        if (item) out.push_back(*item);
      }
    }
  }
  return out;
}

bool on_cpu(const graph::Graph& g, ValueId v) {
  return g.type(v).device.kind == graph::DeviceKind::CPU;
}

// A node that can join a fused group: pointwise, one output, every tensor on the CPU with a
// loop-IR dtype.
bool fusible(const graph::Graph& g, const graph::Node& n) {
  if (n.outputs.size() != 1 || !is_pointwise(g, n)) return false;
  if (!on_cpu(g, n.outputs[0]) || !to_loop_dtype(g.type(n.outputs[0]).dtype)) return false;
  for (ValueId v : tensor_args(n)) {
    if (!on_cpu(g, v) || !to_loop_dtype(g.type(v).dtype)) return false;
  }
  return true;
}

// Builds the kernel of one group. The iteration space is the group's output shape; every value
// computed in the group has that shape, so in-group values are used at the same index, and
// realized inputs are read with broadcasting at their traced strides.
loop::Kernel build_kernel(const graph::Graph& g, const KernelGroup& group, const std::string& name,
                          const ScheduleOptions& options) {
  const graph::TensorType& out_t = g.type(group.outputs.front());
  std::vector<int64_t> shape = sizes_of(out_t);
  const size_t rank = shape.size();
  std::vector<loop::Expr> iv;
  for (size_t d = 0; d < rank; ++d) iv.push_back(loop::var("i" + std::to_string(d)));

  loop::Kernel k;
  k.name = name;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g, group, k);

  // The flat offset of the element at the group index in a tensor of type t (broadcast from the
  // right; size-1 dims read element 0).
  auto offset_in = [&](const graph::TensorType& t) {
    loop::Expr off = loop::idx(0);
    const size_t r = t.sizes.size();
    for (size_t d = 0; d < r; ++d) {
      int64_t size = t.sizes[d].constant();
      if (size == 1) continue;
      loop::Expr term = loop::make_binary(loop::ExprKind::Mul, iv[d + rank - r],
                                          loop::idx(t.strides[d].constant()));
      off = loop::make_binary(loop::ExprKind::Add, off, term);
    }
    return off;
  };

  // Values computed in the group, bound by Lets named t<value>.
  std::map<ValueId, loop::Expr> computed;
  std::vector<std::pair<loop::Expr, loop::Expr>> lets;  // (var, value), in order
  for (int32_t ni : group.nodes) {
    const graph::Node& n = g.nodes[ni];
    std::vector<loop::Expr> in;
    for (ValueId v : tensor_args(n)) {
      auto it = computed.find(v);
      if (it != computed.end()) {
        in.push_back(it->second);
      } else {
        in.push_back(loop::Load::make(*to_loop_dtype(g.type(v).dtype), buffer_of.at(v),
                                      offset_in(g.type(v))));
      }
    }
    loop::Expr value = loop::simplify(lower_pointwise(g, n, in));
    ValueId out = n.outputs[0];
    loop::Expr t = loop::Var::make("t" + std::to_string(out), value.dtype());
    lets.emplace_back(t, value);
    computed[out] = t;
  }

  std::vector<loop::Stmt> stores;
  for (ValueId v : group.outputs) {
    stores.push_back(
        loop::Store::make(buffer_of.at(v), loop::simplify(offset_in(g.type(v))), computed.at(v)));
  }
  loop::Stmt body = loop::Block::make(std::move(stores));
  for (size_t i = lets.size(); i-- > 0;) {
    body = loop::Let::make(lets[i].first, lets[i].second, body);
  }
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  for (size_t d = rank; d-- > 0;) {
    loop::ForKind kind = loop::ForKind::Serial;
    if (d + 1 == rank) kind = loop::ForKind::Vectorized;
    if (d == 0 && numel >= options.parallel_threshold && rank > 1) kind = loop::ForKind::Parallel;
    if (rank == 1 && numel >= options.parallel_threshold) kind = loop::ForKind::Parallel;
    body = loop::For::make(iv[d], loop::idx(0), loop::idx(shape[d]), kind, body);
  }
  k.body = body;
  return k;
}

}  // namespace

Plan schedule_graph(const graph::Graph& g, const ScheduleOptions& options) {
  Plan plan;
  std::vector<int32_t> group_of_value(g.values.size(), -1);
  int32_t open = -1;  // the group still accepting nodes
  std::vector<int64_t> open_shape;

  auto close = [&] {
    if (open >= 0) plan.steps.push_back({PlanStep::Kind::Kernel, open});
    open = -1;
  };
  // Groups of one reduction node (softmax, layer_norm, sum, ...), built by reduction.h.
  std::vector<bool> reduction_group;

  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    const graph::Node& n = g.nodes[ni];
    if (options.fuse && options.reductions && is_reduction_kernel_node(g, n)) {
      // Its own group, after the open one (which it may read).
      close();
      int32_t gi = static_cast<int32_t>(plan.groups.size());
      plan.groups.emplace_back().nodes.push_back(ni);
      reduction_group.resize(plan.groups.size(), false);
      reduction_group[gi] = true;
      for (ValueId o : n.outputs) group_of_value[o] = gi;
      plan.steps.push_back({PlanStep::Kind::Kernel, gi});
      continue;
    }
    if (options.fuse && fusible(g, n)) {
      std::vector<int64_t> shape = sizes_of(g.type(n.outputs[0]));
      // Reading a value of a group that already ran would need it realized: it is (it is an
      // output of that group). Reading the open group's values needs the same shape: it has it.
      if (open >= 0 && shape != open_shape) close();
      if (open < 0) {
        open = static_cast<int32_t>(plan.groups.size());
        plan.groups.emplace_back();
        open_shape = shape;
      }
      plan.groups[open].nodes.push_back(ni);
      group_of_value[n.outputs[0]] = open;
      continue;
    }
    // An extern that reads a value of the open group: the group must run first.
    for (ValueId v : all_reads(n)) {
      if (open >= 0 && group_of_value[v] == open) {
        close();
        break;
      }
    }
    plan.steps.push_back({PlanStep::Kind::Extern, ni});
  }
  close();
  reduction_group.resize(plan.groups.size(), false);

  // Which groups read each value from outside, and whether anything else needs it.
  std::vector<bool> needed_outside(g.values.size(), false);
  for (ValueId v : g.outputs) needed_outside[v] = true;
  for (const graph::Mutation& m : g.mutations) needed_outside[m.value] = true;
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    // All outputs of a node are in its group (or in none: an extern node).
    int32_t my_group = -1;
    if (!g.nodes[ni].outputs.empty()) my_group = group_of_value[g.nodes[ni].outputs[0]];
    for (ValueId r : all_reads(g.nodes[ni])) {
      if (group_of_value[r] >= 0 && group_of_value[r] != my_group) needed_outside[r] = true;
    }
  }

  // Inputs, outputs and kernel of each group. A group none of whose values is needed is dead
  // (pointwise and reduction nodes have no side effects): it is dropped with its step. Outputs
  // are in node order, then output order (a node may have several: native_layer_norm).
  std::vector<bool> dead(plan.groups.size(), false);
  for (int32_t gi = 0; gi < static_cast<int32_t>(plan.groups.size()); ++gi) {
    KernelGroup& group = plan.groups[gi];
    std::set<ValueId> seen_inputs;
    for (int32_t ni : group.nodes) {
      for (ValueId v : tensor_args(g.nodes[ni])) {
        if (group_of_value[v] != gi && seen_inputs.insert(v).second) group.inputs.push_back(v);
      }
      for (ValueId out : g.nodes[ni].outputs) {
        if (needed_outside[out]) group.outputs.push_back(out);
      }
    }
    if (group.outputs.empty()) {
      dead[gi] = true;
      continue;
    }
    plan.num_fused_nodes += static_cast<int>(group.nodes.size());
    std::string name = "k" + std::to_string(gi);
    group.kernel = reduction_group[gi]
                       ? build_reduction_kernel(g, g.nodes[group.nodes[0]], group, name, options)
                       : build_kernel(g, group, name, options);
  }
  std::erase_if(plan.steps, [&](const PlanStep& s) {
    return s.kind == PlanStep::Kind::Kernel && dead[s.index];
  });
  return plan;
}

}  // namespace ember::sched
