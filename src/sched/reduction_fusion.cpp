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
#include "support/error.h"

namespace ember::sched::fusion_detail {

ReductionGroupBuilder::ReductionGroupBuilder(const FusionState& s, int32_t node,
                                             std::vector<ValueId> outputs, bool fuse)
    : s_(s), g_(s.graph()), node_(node), outputs_(std::move(outputs)) {
  const graph::Node& n = g_.nodes[node_];
  std::optional<ReductionSpec> spec = analyze_reduction(g_, n, /*coalesce=*/false);
  EMBER_INTERNAL_ASSERT(spec.has_value()) << "ReductionGroupBuilder: not a reduction kernel node";
  fusible_ = fuse && supports_reduction_fusion(g_, n);
  x_value_ = spec->x.value;
  x_sizes_ = sizes_of(g_.type(x_value_));
  if (!s_.realized(x_value_)) {
    EMBER_INTERNAL_ASSERT(fusible_)
        << "the input of reduction node " << node_ << " is not realized";
    prologue_.emplace(s_, x_sizes_);
    x_ = prologue_->compute(x_value_);
  }
}

bool ReductionGroupBuilder::stores(ValueId v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end() ||
         (epilogue_ && epilogue_->stores(v));
}

bool ReductionGroupBuilder::add_epilogue(ValueId v) {
  if (!fusible_ || sizes_of(g_.type(v)) != x_sizes_) return false;
  std::optional<KernelBuilder> trial;
  if (epilogue_) {
    trial.emplace(*epilogue_);
  } else {
    // The node's outputs are readable at the element's own row (or element) only: where this
    // kernel has just written them.
    trial.emplace(s_, x_sizes_);
    std::optional<ReductionSpec> spec = analyze_reduction(g_, g_.nodes[node_], false);
    for (const ReductionOperand& o : spec->outputs) {
      Expr off = loop::idx(0);
      for (size_t d = 0; d < o.strides.size(); ++d) {
        if (o.strides[d] != 0) off = off + loop::var(loop_var(d)) * loop::idx(o.strides[d]);
      }
      trial->bind_reads(o.value, off);
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
    if (std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end()) return;
    if (std::find(group.inputs.begin(), group.inputs.end(), v) == group.inputs.end()) {
      group.inputs.push_back(v);
    }
  };
  for (ValueId v : tensor_args(n)) {
    if (!(prologue_ && v == x_value_)) add_input(v);
  }
  for (const std::optional<KernelBuilder>* b : {&prologue_, &epilogue_}) {
    if (!*b) continue;
    for (ValueId v : (*b)->inputs()) add_input(v);
    nodes.insert((*b)->nodes().begin(), (*b)->nodes().end());
  }
  group.nodes.assign(nodes.begin(), nodes.end());
  group.outputs = outputs_;
  if (epilogue_) {
    for (ValueId v : epilogue_->stored_values()) group.outputs.push_back(v);
  }
  if (!prologue_ && !epilogue_) {
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
  if (prologue_) {
    fusion.x = expr(x_);
    for (const auto& [var, value] : prologue_->lets()) fusion.x_lets.emplace_back(var, expr(value));
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
