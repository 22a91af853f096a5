#include "runtime/binding_layouts.h"

#include <algorithm>

#include "runtime/executor_internal.h"
#include "runtime/specialize.h"
#include "sym/eval.h"

namespace ember::runtime {

namespace {

int64_t value_of(const graph::DimExpr& d, const sym::Bindings& bindings) {
  std::optional<int64_t> c = d.as_constant();
  return c ? *c : sym::evaluate(d.expr(), bindings);
}

std::vector<int64_t> values_of(const graph::Dims& dims, const sym::Bindings& bindings) {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const graph::DimExpr& d : dims) out.push_back(value_of(d, bindings));
  return out;
}

/// A symbolic argument of an extern call (a DimExpr or Dims), as the int or int list the
/// operator takes.
c10::IValue arg_value(const graph::Arg& a, const sym::Bindings& bindings) {
  if (const auto* d = std::get_if<graph::DimExpr>(&a)) return c10::IValue(value_of(*d, bindings));
  return c10::IValue(values_of(std::get<graph::Dims>(a), bindings));
}

}  // namespace

BindingLayouts make_binding_layouts(const Program& p, const std::vector<int64_t>& symbols,
                                    const sym::Bindings& bindings) {
  BindingLayouts out;
  out.kernels.resize(p.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    if (!k.symbolic) continue;
    BindingLayouts::KernelLayouts& l = out.kernels[i];
    for (const auto& [sizes, strides] : k.symbolic_inputs) {
      l.input_sizes.push_back(values_of(sizes, bindings));
      l.input_strides.push_back(values_of(strides, bindings));
    }
    for (const auto& [sizes, strides] : k.symbolic_outputs) {
      l.output_sizes.push_back(values_of(sizes, bindings));
      l.output_strides.push_back(values_of(strides, bindings));
    }
    for (int id : k.size_symbols) l.size_args.push_back(symbols.at(static_cast<size_t>(id)));
  }
  out.views.resize(p.steps.size());
  out.extern_args.resize(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    if (step.view && step.view->symbolic) {
      const View& v = *step.view;
      BindingLayouts::ViewLayouts& l = out.views[s];
      l.root_sizes = values_of(v.symbolic_root_sizes, bindings);
      l.root_strides = values_of(v.symbolic_root_strides, bindings);
      for (const ViewOutput& o : v.outputs) {
        l.sizes.push_back(values_of(o.symbolic_sizes, bindings));
        l.strides.push_back(values_of(o.symbolic_strides, bindings));
        l.offset_deltas.push_back(value_of(o.symbolic_offset_delta, bindings));
      }
    }
    if (step.call && !step.call->symbolic_args.empty()) {
      for (const auto& [pos, a] : step.call->symbolic_args) {
        out.extern_args[s].push_back(arg_value(*a, bindings));
      }
    }
  }
  if (!p.arena_slots.empty() && !p.arena_plan) {
    // Note [An arena over shape symbols]: the slots' sizes at this binding.
    std::vector<sched::BufferLifetime> lifetimes;
    lifetimes.reserve(p.arena_slots.size());
    for (const Program::ArenaSlot& slot : p.arena_slots) {
      lifetimes.push_back({layout_bytes(values_of(slot.sizes, bindings),
                                        values_of(slot.strides, bindings), slot.itemsize),
                           slot.first, slot.last});
    }
    out.arena =
        std::make_shared<const sched::ArenaPlan>(sched::plan_arena(lifetimes, kArenaAlignment));
  }
  return out;
}

std::shared_ptr<const BindingLayouts> BindingLayoutCache::get(
    const Program& p, const std::vector<int64_t>& symbols) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].first != symbols) continue;
      if (i > 0) std::rotate(entries_.begin(), entries_.begin() + i, entries_.begin() + i + 1);
      return entries_.front().second;
    }
  }
  auto made = std::make_shared<const BindingLayouts>(
      make_binding_layouts(p, symbols, to_bindings(symbols)));
  std::lock_guard<std::mutex> lock(mu_);
  entries_.insert(entries_.begin(), {symbols, made});
  if (entries_.size() > kCapacity) entries_.pop_back();
  return made;
}

}  // namespace ember::runtime
