// Reduction kernel groups with prologues and epilogues: see ReductionGroupBuilder in
// fusion_internal.h and docs/design/scheduler.md.
#include <algorithm>
#include <set>

#include "loop/traverse.h"
#include "sched/fusion_internal.h"
#include "sched/kernel_params.h"
#include "sched/reduction.h"
#include "sched/reduction_loops.h"
#include "sched/reduction_spec.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched::fusion_detail {

ReductionGroupBuilder::ReductionGroupBuilder(const FusionState& s, int32_t node,
                                             std::vector<ValueId> outputs, bool fuse,
                                             const std::vector<ValueId>& stored)
    : s_(s), g_(s.graph()), node_(node), outputs_(std::move(outputs)) {
  const graph::Node& n = g_.nodes[node_];
  std::optional<ReductionSpec> spec = analyze_reduction(g_, n, /*coalesce=*/false);
  EMBER_INTERNAL_ASSERT(spec.has_value()) << "ReductionGroupBuilder: not a reduction kernel node";
  spec_ = std::move(*spec);
  fusible_ = fuse && supports_reduction_fusion(g_, n);
  x_value_ = spec_.x.value;
  x_sizes_ = g_.type(x_value_).sizes;
  const bool x_stored = std::find(stored.begin(), stored.end(), x_value_) != stored.end();
  if (!s_.realized(x_value_) || x_stored) {
    EMBER_INTERNAL_ASSERT(fusible_ || !stored.empty())
        << "the input of reduction node " << node_ << " is not realized";
    prologue_.emplace(s_, x_sizes_);
    for (ValueId v : stored) prologue_->compute_inline(v);
    x_ = prologue_->compute(x_value_);
  }
  if (!stored.empty()) {
    absorbed_ = fusible_ && prologue_.has_value();
    for (ValueId v : stored) {
      absorbed_ = absorbed_ && prologue_->nodes().count(g_.values[v].node) > 0 && add_epilogue(v);
    }
  }
}

bool ReductionGroupBuilder::stores(ValueId v) const {
  for (const Sibling& sib : siblings_) {
    if (std::find(sib.outputs.begin(), sib.outputs.end(), v) != sib.outputs.end()) return true;
  }
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end() ||
         (epilogue_ && epilogue_->stores(v));
}

// Note [Sibling reductions]
// Reductions over one space that read no result of each other fold into one kernel: one more
// accumulator each in the same pass over the rows, which loads what their inputs share once.
// Batch norm's backward sums the activation gradient g and g * x^ over the same rows (its bias
// and weight gradients); as two kernels each computed g's chain again (a ReLU's mask, a residual
// add) and read it once more, where ATen's kernel reads it once for both. A later reduction node
// joins the open reduction group when both are sums, means, prods, amaxes or amins over the same
// sizes and reduced dims, no epilogue has joined yet, and its input (computed inline by the same
// prologue builder, so that shared producers are one let, or loaded) reads nothing the group
// stores. Only adjacent ones: anything stored between them closes the group, so the tracer
// records such sums next to each other (rewrite/split_reduction.h, sums_in_stages).
bool ReductionGroupBuilder::add_sibling(int32_t node, std::vector<ValueId> outputs) {
  if (!fusible_ || epilogue_ || outputs.empty()) return false;
  const graph::Node& n = g_.nodes[node];
  std::optional<ReductionSpec> theirs = analyze_reduction(g_, n, false);
  if (!theirs || !takes_siblings(spec_) || !takes_siblings(*theirs) ||
      spec_.sizes != theirs->sizes || spec_.reduced != theirs->reduced) {
    return false;
  }
  for (ValueId v : tensor_args(n)) {
    if (stores(v)) return false;
  }
  const ValueId x = theirs->x.value;
  Sibling sib{node, std::move(*theirs), std::move(outputs), x, Expr()};
  if (!s_.realized(sib.x_value)) {
    std::optional<KernelBuilder> trial;
    if (prologue_) {
      trial.emplace(*prologue_);
    } else {
      trial.emplace(s_, x_sizes_);
    }
    sib.x = trial->compute(sib.x_value);
    for (ValueId v : trial->inputs()) {
      if (stores(v)) return false;
    }
    prologue_.emplace(std::move(*trial));
  }
  siblings_.push_back(std::move(sib));
  return true;
}

bool ReductionGroupBuilder::add_epilogue(ValueId v) {
  if (!fusible_ || g_.type(v).sizes != x_sizes_) return false;
  std::optional<KernelBuilder> trial;
  if (epilogue_) {
    trial.emplace(*epilogue_);
  } else {
    // The node's outputs are readable at the element's own row (or element) only: where this
    // kernel has just written them.
    trial.emplace(s_, x_sizes_);
    std::vector<const ReductionSpec*> members = {&spec_};
    for (const Sibling& sib : siblings_) members.push_back(&sib.spec);
    for (const ReductionSpec* spec : members) {
      for (const ReductionOperand& o : spec->outputs) {
        Expr off = loop::idx(0);
        for (size_t d = 0; d < o.strides.size(); ++d) {
          if (!is_constant(o.strides[d], 0)) {
            off = off + loop::var(loop_var(d)) * dim_expr(o.strides[d]);
          }
        }
        trial->bind_reads(o.value, off);
      }
    }
  }
  if (!trial->add_store(v) || trial->has_index_checks()) return false;
  epilogue_.emplace(std::move(*trial));
  return true;
}

std::vector<Use> ReductionGroupBuilder::uses() const {
  std::vector<Use> out;
  if (prologue_) out = prologue_->uses();
  if (epilogue_) out.insert(out.end(), epilogue_->uses().begin(), epilogue_->uses().end());
  return out;
}

KernelGroup ReductionGroupBuilder::finish(const std::string& name,
                                          const ScheduleOptions& options) const {
  const graph::Node& n = g_.nodes[node_];
  KernelGroup group;
  std::set<int32_t> nodes = {node_};
  auto add_input = [&](ValueId v) {
    if (stores(v)) return;  // written by this kernel
    if (std::find(group.inputs.begin(), group.inputs.end(), v) == group.inputs.end()) {
      group.inputs.push_back(v);
    }
  };
  for (ValueId v : tensor_args(n)) {
    if (!(x_.defined() && v == x_value_)) add_input(v);
  }
  for (const Sibling& sib : siblings_) {
    nodes.insert(sib.node);
    for (ValueId v : tensor_args(g_.nodes[sib.node])) {
      if (!(sib.x.defined() && v == sib.x_value)) add_input(v);
    }
  }
  for (const std::optional<KernelBuilder>* b : {&prologue_, &epilogue_}) {
    if (!*b) continue;
    for (ValueId v : (*b)->inputs()) add_input(v);
    nodes.insert((*b)->nodes().begin(), (*b)->nodes().end());
  }
  group.nodes.assign(nodes.begin(), nodes.end());
  group.outputs = outputs_;
  for (const Sibling& sib : siblings_) {
    group.outputs.insert(group.outputs.end(), sib.outputs.begin(), sib.outputs.end());
  }
  if (epilogue_) {
    for (ValueId v : epilogue_->stored_values()) group.outputs.push_back(v);
  }
  if (!prologue_ && !epilogue_ && siblings_.empty()) {
    group.kernel = build_reduction_kernel(g_, n, group, name, options);
    return group;
  }

  // The fused pieces name buffers value_buffer(v) and dims loop_var(d): rename them to the
  // kernel's buffers and the reduction's element variables.
  loop::Kernel scratch;
  std::map<std::string, std::string> names;
  for (const auto& [v, buf] : add_group_buffers(g_, group, scratch)) names[value_buffer(v)] = buf;
  std::map<std::string, Expr> vars;
  for (size_t d = 0; d < x_sizes_.size(); ++d) vars[loop_var(d)] = element_var(d);
  auto expr = [&](const Expr& e) { return rename_buffers(loop::substitute(e, vars), names); };
  ReductionFusion fusion;
  if (x_.defined()) fusion.x = expr(x_);
  if (prologue_) {
    for (const auto& [var, value] : prologue_->lets()) fusion.x_lets.emplace_back(var, expr(value));
  }
  for (const Sibling& sib : siblings_) {
    fusion.siblings.push_back({&g_.nodes[sib.node], sib.x.defined() ? expr(sib.x) : Expr()});
  }
  if (epilogue_) fusion.epilogue = rename_buffers(loop::substitute(epilogue_->body(), vars), names);
  group.kernel = build_reduction_kernel(g_, n, group, name, options, fusion);
  if (prologue_ && prologue_->has_index_checks()) {
    group.kernel.body =
        rename_buffers(prologue_->with_index_checks(group.kernel.body, group), names);
  }
  return group;
}

}  // namespace ember::sched::fusion_detail
