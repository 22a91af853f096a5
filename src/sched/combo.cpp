#include "sched/combo.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loop/eval.h"
#include "loop/traverse.h"
#include "loop/verifier.h"
#include "sched/kernel_params.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;

// Note [Combo kernels]
// Adam's step over N parameters, as Note [Held kernels] leaves it, is per parameter one kernel of
// scalars (the step count, the bias corrections) and one over the parameter's shape that reads
// it: 2N kernel steps, 2N launches, where eager's foreach code launches a handful of
// multi-tensor kernels. The kernels of different parameters are independent, so this pass,
// run on the finished plan, merges them into combo kernels: each combinable kernel step (a
// pointwise nest, or scalar code) joins the earliest open combo placed after every step that
// writes a value it reads, else opens a combo where it stands. The scalar kernels of every
// parameter then form one combo and the parameters' updates another, whatever N (up to
// kMaxComboParts per combo). The merged kernel runs its parts' loop nests: in order on the CPU
// (one function, one call), and as one Triton launch whose programs are split among the parts.
//  - Kernels only move up: their results exist sooner, and whatever reads them stays after them.
//  - No kernel moves across an extern step: ATen calls keep their order and their place among
//    the kernels (a random op draws as before; a value cannot be computed many ATen calls before
//    its use and held in memory meanwhile). Combos are closed at each extern step.
//  - Not merged: reductions and scatters (their kernels are not one pointwise nest), kernels that
//    check index tensors (their status buffer), and kernels of parameters only, whose outputs
//    the executor keeps across calls (Kernel::parameter_cache in runtime/executor.h).
// A kernel that joins no other is left exactly as it was, so plans with nothing to merge do not
// change.
//  - Over shape symbols (issue 35) parts merge as over constants: the combo takes the size
//    variables of all its parts, and a part's size limit is judged at the symbols' hints. At
//    another size each part still covers its own extent (the Triton launch sums the parts'
//    programs at each call's sizes), so only speed, never a result, rests on the hint.

// Whether `s` only binds values and stores: a pointwise nest's innermost body.
bool straight(const loop::Stmt& s) {
  switch (s.kind()) {
    case loop::StmtKind::Store:
      return true;
    case loop::StmtKind::Let:
      return straight(s.as<loop::Let>()->body);
    case loop::StmtKind::Block:
      for (const loop::Stmt& c : s.as<loop::Block>()->stmts) {
        if (!straight(c)) return false;
      }
      return true;
    default:
      return false;
  }
}

// A perfect loop nest around a straight-line body, or a straight-line statement that is not a
// Block (which would splice into the combo's Block and split the part).
bool pointwise_body(const loop::Stmt& body) {
  loop::Stmt inner = body;
  bool nest = false;
  while (const auto* f = inner.as<loop::For>()) {
    inner = f->body;
    nest = true;
  }
  return (nest || inner.kind() != loop::StmtKind::Block) && straight(inner);
}

// The iterations of a pointwise nest, its extents over size variables taken at `hints` (a
// heuristic: which kernels keep their own Triton form and block size, never what one computes).
int64_t nest_elements(const loop::Stmt& body, const loop::Bindings& hints) {
  loop::EvalEnv env;
  env.sizes = hints;
  int64_t n = 1;
  for (const loop::For* f = body.as<loop::For>(); f != nullptr; f = f->body.as<loop::For>()) {
    n *= std::max<int64_t>(loop::eval_expr(f->extent, env).i, 0);
    if (n > kMaxComboPartElements) return n;
  }
  return n;
}

// The symbols' hints by name, as size variables are bound.
loop::Bindings size_hints(const sym::ShapeEnv& symbols) {
  loop::Bindings out;
  for (const sym::SymbolInfo& s : symbols.symbols()) out[s.name] = s.hint;
  return out;
}

// The values a step writes.
std::vector<ValueId> step_writes(const graph::Graph& g, const Plan& plan, const PlanStep& s) {
  if (s.kind == PlanStep::Kind::Kernel) return plan.groups[s.index].outputs;
  return g.nodes[s.index].outputs;
}

// One entry of the new program: a step, or (a Kernel step with several members) a combo.
struct Entry {
  PlanStep step;
  std::vector<int> members;  // groups of the old plan, in step order; Kernel steps only
  std::set<ValueId> buffers;
};

KernelGroup merge(const graph::Graph& g, const Plan& plan, const std::vector<int>& members) {
  KernelGroup merged;
  std::set<int32_t> nodes;
  for (int m : members) {
    const KernelGroup& part = plan.groups[m];
    nodes.insert(part.nodes.begin(), part.nodes.end());
    for (ValueId v : part.inputs) {
      if (std::find(merged.inputs.begin(), merged.inputs.end(), v) == merged.inputs.end()) {
        merged.inputs.push_back(v);
      }
    }
    merged.outputs.insert(merged.outputs.end(), part.outputs.begin(), part.outputs.end());
  }
  merged.nodes.assign(nodes.begin(), nodes.end());
  loop::Kernel& k = merged.kernel;
  k.name = plan.groups[members.front()].kernel.name;  // unique: the group is merged away
  k.combo = true;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g, merged, k);
  std::vector<loop::Stmt> parts;
  for (int m : members) {
    const KernelGroup& part = plan.groups[m];
    std::map<std::string, std::string> names;
    for (size_t i = 0; i < part.kernel.buffers.size(); ++i) {
      const ValueId v =
          i < part.inputs.size() ? part.inputs[i] : part.outputs[i - part.inputs.size()];
      names[part.kernel.buffers[i].name] = buffer_of.at(v);
    }
    parts.push_back(loop::rename_buffers(part.kernel.body, names));
    // An output written over a dead input's memory: only where no other part reads the input.
    for (const auto& [in, out] : part.reuse) {
      bool shared = false;
      for (int o : members) {
        const std::vector<ValueId>& ins = plan.groups[o].inputs;
        shared |= o != m && std::find(ins.begin(), ins.end(), in) != ins.end();
      }
      if (!shared) merged.reuse.emplace_back(in, out);
    }
  }
  k.body = loop::Block::make(std::move(parts));
  k.size_vars = kernel_size_vars(k, g.symbols);  // the parts' together, in symbol order
  loop::check_kernel(k);
  return merged;
}

}  // namespace

bool combinable(const graph::Graph& g, const KernelGroup& group) {
  if (group.outputs.empty() || group.index_status || group.kernel.combo ||
      !pointwise_body(group.kernel.body) ||
      nest_elements(group.kernel.body, size_hints(g.symbols)) > kMaxComboPartElements) {
    return false;
  }
  // A kernel of parameters and buffers only (autocast's weight casts, a batch norm's per-channel
  // terms) is skipped while they are unchanged.
  std::set<ValueId> parameters;
  for (const graph::Input& in : g.inputs) {
    if (graph::is_module_state(in.kind)) parameters.insert(in.value);
  }
  for (const graph::Mutation& m : g.mutations) parameters.erase(m.input);
  return !std::all_of(group.inputs.begin(), group.inputs.end(), [&](ValueId v) {
    return parameters.count(v) > 0;
  }) || group.inputs.empty();
}

Plan combine_kernels(const graph::Graph& g, Plan plan) {
  std::vector<Entry> out;
  std::vector<int> written_at(g.values.size(), -1);  // the entry writing each value
  std::vector<size_t> open;                          // combos that kernels may still join
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStep::Kind::Extern) open.clear();
    if (s.kind == PlanStep::Kind::Kernel && combinable(g, plan.groups[s.index])) {
      const KernelGroup& group = plan.groups[s.index];
      int after = -1;
      for (ValueId v : group.inputs) after = std::max(after, written_at[v]);
      std::set<ValueId> own(group.inputs.begin(), group.inputs.end());
      own.insert(group.outputs.begin(), group.outputs.end());
      int chosen = -1;
      for (size_t e : open) {
        if (static_cast<int>(e) <= after) continue;
        std::set<ValueId> buffers = out[e].buffers;
        buffers.insert(own.begin(), own.end());
        if (out[e].members.size() < static_cast<size_t>(kMaxComboParts) &&
            buffers.size() <= static_cast<size_t>(kMaxComboBuffers)) {
          chosen = static_cast<int>(e);
          out[e].buffers = std::move(buffers);
          out[e].members.push_back(s.index);
          break;
        }
      }
      if (chosen < 0) {
        chosen = static_cast<int>(out.size());
        out.push_back(Entry{s, {s.index}, own});
        open.push_back(out.size() - 1);
      }
      for (ValueId v : group.outputs) written_at[v] = chosen;
      continue;
    }
    for (ValueId v : step_writes(g, plan, s)) written_at[v] = static_cast<int>(out.size());
    out.push_back(Entry{s, {}, {}});
  }

  Plan merged;
  merged.num_fused_nodes = plan.num_fused_nodes;
  std::vector<bool> placed(plan.groups.size(), false);
  for (Entry& e : out) {
    if (e.step.kind != PlanStep::Kind::Kernel) {
      merged.steps.push_back(e.step);
      continue;
    }
    const int index = static_cast<int>(merged.groups.size());
    if (e.members.size() <= 1) {
      placed[e.step.index] = true;
      merged.groups.push_back(std::move(plan.groups[e.step.index]));
    } else {
      for (int m : e.members) placed[m] = true;
      merged.groups.push_back(merge(g, plan, e.members));
    }
    merged.steps.push_back({PlanStep::Kind::Kernel, index});
  }
  for (size_t gi = 0; gi < placed.size(); ++gi) {
    EMBER_INTERNAL_ASSERT(placed[gi]) << "kernel group " << gi << " has no step";
  }
  return merged;
}

}  // namespace ember::sched
