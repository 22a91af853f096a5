/// \file
/// What a symbolic program's call computes from its sizes alone, computed once per binding of
/// the shape symbols: each symbolic kernel's input and output layouts, each symbolic view's
/// geometry, each extern step's symbolic arguments, and the arena plan. The executor keeps the
/// layouts of the last few bindings (BindingLayoutCache), so calls at sizes seen before evaluate
/// no expression.
///
/// Note [Layouts per binding]
/// A symbolic program evaluated every size and stride expression of every step at every call:
/// two vectors and a walk of each expression per kernel input and output, per view, per
/// symbolic argument and per arena slot. At small sizes that was most of the symbolic graph's
/// extra cost over the static one (a BERT layer of width 32 at 6 tokens on the CPU: about 7 us
/// of a 50 us call). Calls repeat sizes (a server's batch of one length, a training loop's fixed
/// sequence length), so the evaluated layouts are kept per binding.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/program.h"
#include "sched/memory_plan.h"
#include "sym/shape_env.h"

namespace ember::runtime {

struct BindingLayouts {
  /// A symbolic kernel's layouts (Kernel::symbolic_inputs, symbolic_outputs), evaluated.
  struct KernelLayouts {
    std::vector<std::vector<int64_t>> input_sizes, input_strides;
    std::vector<std::vector<int64_t>> output_sizes, output_strides;
    std::vector<int64_t> size_args;  ///< Kernel::size_symbols' values
  };
  /// A symbolic view step's geometry (View::symbolic_*), evaluated.
  struct ViewLayouts {
    std::vector<int64_t> root_sizes, root_strides;
    std::vector<std::vector<int64_t>> sizes, strides;
    std::vector<int64_t> offset_deltas;
  };
  std::vector<KernelLayouts> kernels;  ///< by kernel index; empty for a static kernel
  std::vector<ViewLayouts> views;      ///< by step index; empty unless a symbolic view
  /// By step index: an extern step's ExternCall::symbolic_args, evaluated, in their order.
  std::vector<std::vector<c10::IValue>> extern_args;
  /// The arena's plan at these sizes (Program::arena_slots), or null without an arena.
  std::shared_ptr<const sched::ArenaPlan> arena;
};

/// The layouts of program `p` under `bindings` (every symbol of `p` bound; `symbols` the same
/// values by id).
BindingLayouts make_binding_layouts(const Program& p, const std::vector<int64_t>& symbols,
                                    const sym::Bindings& bindings);

/// The layouts of the last kCapacity bindings a program was called with, most recent first.
/// Thread-safe; the layouts handed out stay valid while held.
class BindingLayoutCache {
 public:
  static constexpr size_t kCapacity = 8;
  /// The layouts for `symbols`, made (make_binding_layouts) when not kept.
  std::shared_ptr<const BindingLayouts> get(const Program& p,
                                            const std::vector<int64_t>& symbols) const;

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const BindingLayouts>>>
      entries_;
};

}  // namespace ember::runtime
