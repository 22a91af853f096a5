/// \file
/// Running the executor's program, once per call: run() and its checks of the inputs, then
/// run_program: the program's values, the per-call arena, each step (kernel, view,
/// matrix-product template, extern call) with its values released after it, and the
/// graph's mutations written back into its inputs.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>

#include "runtime/executor.h"
#include "runtime/executor_internal.h"
#include "runtime/host_times.h"
#include "support/error.h"
#include "sym/eval.h"
#include "tracer/convert.h"

namespace ember::runtime {

bool has_layout(const at::Tensor& t, const std::vector<int64_t>& sizes,
                const std::vector<int64_t>& strides) {
  if (t.dim() != static_cast<int64_t>(sizes.size())) return false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t size = t.size(static_cast<int64_t>(d));
    if (size != sizes[d]) return false;
    if (size > 1 && t.stride(static_cast<int64_t>(d)) != strides[d]) return false;
  }
  return true;
}

namespace {

/// Whether `kept[i]` has the sizes, strides, dtype and device of `env[outs[i]]` for every output.
bool same_layouts(const std::vector<at::Tensor>& kept, const std::vector<at::Tensor>& env,
                  const std::vector<graph::ValueId>& outs) {
  if (kept.size() != outs.size()) return false;
  for (size_t i = 0; i < kept.size(); ++i) {
    const at::Tensor &a = kept[i], &b = env[outs[i]];
    if (!a.defined() || !b.defined() || a.scalar_type() != b.scalar_type() ||
        a.device() != b.device() || !a.sizes().equals(b.sizes()) ||
        !a.strides().equals(b.strides())) {
      return false;
    }
  }
  return true;
}

/// The byte range [first, last) that `t` can reach in its storage; empty for no elements.
std::pair<int64_t, int64_t> byte_range(const at::Tensor& t) {
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return {0, 0};
    extent += (t.size(d) - 1) * std::abs(t.stride(d));
  }
  const int64_t item = static_cast<int64_t>(t.element_size());
  const int64_t first = t.storage_offset() * item;
  return {first, first + extent * item};
}

}  // namespace

bool memory_overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || !a.has_storage() || !b.has_storage()) return false;
  if (a.storage().unsafeGetStorageImpl() != b.storage().unsafeGetStorageImpl()) return false;
  auto [a0, a1] = byte_range(a);
  auto [b0, b1] = byte_range(b);
  return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

bool any_shares_storage(const std::vector<at::Tensor>& inputs, const std::vector<size_t>& which) {
  for (size_t m : which) {
    if (m >= inputs.size()) continue;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i != m && memory_overlaps(inputs[m], inputs[i])) return true;
    }
  }
  return false;
}

bool Executor::mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const {
  return any_shares_storage(inputs, p_.mutated_input_positions);
}

bool Executor::strides_match(const std::vector<at::Tensor>& inputs) const {
  if (p_.symbol_sources) return true;  // checked by runs_per_binding
  const graph::Graph& g = p_.traced.graph;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorType& t = g.type(p_.input_slots[i]);
    for (int64_t d = 0; d < inputs[i].dim(); ++d) {
      if (inputs[i].size(d) > 1 && inputs[i].stride(d) != t.strides[d].constant()) return false;
    }
  }
  return true;
}

void Executor::note_layout_copy(const std::string& where, const at::Tensor& got) const {
  layout_copies_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(layout_notes_mu_);
  if (layout_copy_notes_.size() >= 32) return;
  std::ostringstream os;
  os << where << " came as " << got.scalar_type() << got.sizes() << " strides " << got.strides();
  layout_copy_notes_.push_back(os.str());
}

std::vector<std::string> Executor::layout_copy_notes() const {
  std::lock_guard<std::mutex> lock(layout_notes_mu_);
  return layout_copy_notes_;
}

bool Executor::run_view(const Step& step, std::vector<at::Tensor>& env,
                        const BindingLayouts::ViewLayouts* layouts) const {
  const View& v = *step.view;
  at::Tensor base = env[v.root];
  if (!base.defined() || !base.has_storage() || base.layout() != at::kStrided || base.is_conj() ||
      base.is_neg() || base.key_set().has(c10::DispatchKey::Python) ||
      (v.symbolic && layouts == nullptr)) {
    if (step.call) return false;
    EMBER_INTERNAL_ASSERT(false) << "a view step's root " << v.root
                                 << " is not a plain tensor, or its sizes are not bound";
  }
  // Over shape symbols the geometry is this call's (the symbolic fields evaluated).
  const std::vector<int64_t>& want_sizes = v.symbolic ? layouts->root_sizes : v.root_sizes;
  const std::vector<int64_t>& want_strides = v.symbolic ? layouts->root_strides : v.root_strides;
  if (!has_layout(base, want_sizes, want_strides)) {
    // An extern op returned another layout than its meta kernel promised. A view op runs as the
    // dispatcher call; a collapsed chain views a copy in the traced layout (it then aliases the
    // copy, not the extern's result: both are intermediates).
    if (step.call) return false;
    note_layout_copy("view of %" + std::to_string(v.root), base);
    at::Tensor copy = at::empty_strided(want_sizes, want_strides, base.options());
    copy.copy_(base);
    base = copy;
  }
  for (size_t i = 0; i < v.outputs.size(); ++i) {
    const ViewOutput& o = v.outputs[i];
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(), base.dtype());
    if (v.symbolic) {
      impl->set_sizes_and_strides(layouts->sizes[i], layouts->strides[i],
                                  base.storage_offset() + layouts->offset_deltas[i]);
    } else {
      impl->set_sizes_and_strides(o.sizes, o.strides, base.storage_offset() + o.offset_delta);
    }
    impl->set_version_counter(base.unsafeGetTensorImpl()->version_counter());
    env[o.value] = at::Tensor(std::move(impl));
  }
  return true;
}

Executor::CallArena Executor::take_arena(const BindingLayouts* layouts) const {
  CallArena arena;
  if (p_.arena_slots.empty()) return arena;
  if (p_.arena_plan) {
    arena.plan = &*p_.arena_plan;
  } else {
    // Note [An arena over shape symbols]: planned at this call's sizes (once per binding).
    if (layouts == nullptr || !layouts->arena) return arena;  // every output gets its own memory
    arena.held = layouts->arena;
    arena.plan = arena.held.get();
  }
  const int64_t total = std::max<int64_t>(arena.plan->total_bytes, 1);
  if (!p_.arena_device.is_cpu()) {
    // Note [An arena on the GPU]: one allocation of the caching allocator per call, not pooled.
    arena.memory = at::empty({total}, at::TensorOptions().dtype(at::kByte).device(p_.arena_device));
    return arena;
  }
  {
    std::lock_guard<std::mutex> lock(arena_mu_);
    if (!free_arenas_.empty()) {
      // A symbolic program's arena grows to the largest call's; a smaller one is dropped.
      if (free_arenas_.back().nbytes() >= static_cast<size_t>(total)) {
        arena.memory = std::move(free_arenas_.back());
      }
      free_arenas_.pop_back();
    }
  }
  if (!arena.memory.defined()) {
    arena.memory = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  }
  return arena;
}

at::Tensor Executor::in_arena(const CallArena& arena, int slot, c10::IntArrayRef sizes,
                              c10::IntArrayRef strides, const at::TensorOptions& options) {
  const int64_t itemsize = static_cast<int64_t>(options.dtype().itemsize());
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(arena.memory.storage()),
                                                   arena.memory.key_set(), options.dtype());
  impl->set_sizes_and_strides(sizes, strides, arena.plan->offsets.at(slot) / itemsize);
  return at::Tensor(std::move(impl));
}

bool Executor::run_kernel(const Kernel& k, std::vector<at::Tensor>& env, const CallArena& arena,
                          bool write_through, const BindingLayouts::KernelLayouts* layouts) const {
  if (k.symbolic) {
    // Inputs in the layout of their types under this call's sizes (an extern op may return
    // another: copied, as below); outputs allocated at this call's sizes.
    EMBER_INTERNAL_ASSERT(layouts != nullptr) << k.description << ": run without its layouts";
    std::vector<void*> buffers;
    buffers.reserve(k.inputs.size() + k.outputs.size() + 1);
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      at::Tensor& x = env[k.inputs[i]];
      EMBER_INTERNAL_ASSERT(x.defined())
          << k.description << ": input " << i << " (%" << k.inputs[i] << ") is not defined";
      const graph::TensorType& t = p_.traced.graph.type(k.inputs[i]);
      const std::vector<int64_t>& sizes = layouts->input_sizes[i];
      const std::vector<int64_t>& strides = layouts->input_strides[i];
      if (!has_layout(x, sizes, strides) || tracer::to_graph(x.scalar_type()) != t.dtype) {
        note_layout_copy(k.description + ": input " + std::to_string(i) + " (%" +
                             std::to_string(k.inputs[i]) + ")",
                         x);
        at::Tensor copy =
            at::empty_strided(sizes, strides, x.options().dtype(tracer::to_c10(t.dtype)));
        copy.copy_(x);
        x = copy;
      }
      buffers.push_back(x.data_ptr());
    }
    for (size_t i = 0; i < k.outputs.size(); ++i) {
      at::Tensor& t = env[k.outputs[i]];
      const Kernel::Output& out = k.allocations[i];
      const std::vector<int64_t>& sizes = layouts->output_sizes[i];
      const std::vector<int64_t>& strides = layouts->output_strides[i];
      t = out.arena_slot >= 0 && arena.memory.defined()
              ? in_arena(arena, out.arena_slot, sizes, strides, out.options)
              : at::empty_strided(sizes, strides, out.options);
      buffers.push_back(t.data_ptr());
    }
    if (k.triton) {
      std::vector<at::Tensor> args;
      args.reserve(k.inputs.size() + k.outputs.size());
      for (graph::ValueId v : k.inputs) args.push_back(env[v]);
      for (graph::ValueId v : k.outputs) args.push_back(env[v]);
      k.triton->launch(args, layouts->size_args);
      return true;
    }
    bool index_out_of_range = false;
    if (k.index_status) buffers.push_back(&index_out_of_range);
    k.fn(buffers.data(), layouts->size_args.data());
    return !index_out_of_range;
  }
  std::vector<void*> buffers;
  buffers.reserve(k.inputs.size() + k.outputs.size() + 1);
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    at::Tensor& x = env[k.inputs[i]];
    EMBER_INTERNAL_ASSERT(x.defined())
        << k.description << ": input " << i << " (%" << k.inputs[i] << ") is not defined";
    const Kernel::Output& want = k.input_layouts[i];
    if (!has_layout(x, want.sizes, want.strides) || x.dtype() != want.options.dtype() ||
        x.device() != want.options.device()) {
      // An extern op returned another layout or dtype than its meta kernel promised (bf16
      // _native_batch_norm_legit_functional: f32 statistics traced, bf16 returned): copy it into
      // the traced ones, which the kernel's index math and element type assume.
      note_layout_copy(k.description + ": input " + std::to_string(i) + " (%" +
                           std::to_string(k.inputs[i]) + ")",
                       x);
      at::Tensor copy = at::empty_strided(want.sizes, want.strides, want.options);
      copy.copy_(x);
      x = copy;
    }
    buffers.push_back(x.data_ptr());
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const Kernel::Output& out = k.allocations[i];
    at::Tensor& t = env[k.outputs[i]];
    if (out.unused) {
      // Nothing reads it and the kernel does not write it: an empty stand-in (its pointer is
      // never dereferenced).
      t = at::empty({0}, out.options);
      buffers.push_back(t.data_ptr());
      continue;
    }
    if (out.reuse_input >= 0) {
      // The input is dead after this kernel: when nothing else holds its memory, write there.
      // A mutated graph input (write_through) is the caller's: written when no other input
      // shares its storage (Note [Mutations written in place]).
      const at::Tensor& x = env[k.inputs[out.reuse_input]];
      const bool free =
          out.write_through ? write_through : x.use_count() == 1 && x.storage().use_count() == 1;
      if (free && x.dtype() == out.options.dtype() && has_layout(x, out.sizes, out.strides)) {
        t = x;
        buffers.push_back(t.data_ptr());
        continue;
      }
    }
    if (out.arena_slot >= 0 && arena.memory.defined()) {
      t = in_arena(arena, out.arena_slot, out.sizes, out.strides, out.options);
    } else {
      t = at::empty_strided(out.sizes, out.strides, out.options);
    }
    buffers.push_back(t.data_ptr());
  }
  if (k.triton) {
    std::vector<at::Tensor> args;
    args.reserve(k.inputs.size() + k.outputs.size());
    for (graph::ValueId v : k.inputs) args.push_back(env[v]);
    for (graph::ValueId v : k.outputs) args.push_back(env[v]);
    k.triton->launch(args);
    return true;
  }
  bool index_out_of_range = false;
  if (k.index_status) buffers.push_back(&index_out_of_range);
  k.fn(buffers.data(), nullptr);
  return !index_out_of_range;
}

std::vector<at::Tensor> Executor::run(const std::vector<at::Tensor>& inputs) const {
  // The graph was traced under the caller's autocast state: its casts are nodes already, and an
  // op traced in a region with autocast off (a rotary embedding's fp32 matmul) must not be cast
  // again because the caller's autocast is on now.
  HostStepClock clock(p_.options.debug.host_step_times, HostStep::Run);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  RECORD_USER_SCOPE("ember::graph");
  return run_checked(inputs, check_inputs(inputs));
}

std::vector<at::Tensor> Executor::unfused_run(const std::vector<at::Tensor>& inputs,
                                              const std::vector<int64_t>& symbols) const {
  if (!p_.symbols_from_caller || symbols.empty()) return p_.unfused->run(inputs);
  return p_.unfused->run(std::vector<at::Tensor>(inputs), symbols);
}

std::vector<at::Tensor> Executor::run_and_bind(const std::vector<at::Tensor>& inputs,
                                               std::vector<int64_t>* symbols) const {
  HostStepClock clock(p_.options.debug.host_step_times, HostStep::Run);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  RECORD_USER_SCOPE("ember::graph");
  *symbols = check_inputs(inputs);
  return run_checked(inputs, *symbols);
}

std::vector<at::Tensor> Executor::run_checked(const std::vector<at::Tensor>& inputs,
                                              const std::vector<int64_t>& symbols) const {
  if (runs_per_binding(inputs, symbols)) return p_.specializations->get(symbols)->run(inputs);
  if (p_.cuda_graph) {
    // One CUDA graph per binding of the symbols (cuda_graph.h).
    auto replayed = p_.cuda_graph->run(
        inputs,
        [this, &symbols](const std::vector<at::Tensor>& in) {
          return run_program(in, nullptr, symbols);
        },
        symbols);
    if (replayed.has_value()) return std::move(*replayed);
  }
  return run_program(inputs, nullptr, symbols);
}

bool Executor::runs_per_binding(const std::vector<at::Tensor>& inputs,
                                const std::vector<int64_t>& symbols) const {
  if (!p_.specializations) return false;
  if (!p_.symbolic_fallback.empty()) return true;
  // Symbolic kernels read their inputs at the types' strides.
  const graph::Graph& g = p_.traced.graph;
  sym::Bindings bindings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorType& t = g.type(p_.input_slots[i]);
    for (int64_t d = 0; d < inputs[i].dim(); ++d) {
      if (inputs[i].size(d) <= 1) continue;
      int64_t want = 0;
      if (std::optional<int64_t> c = t.strides[d].as_constant()) {
        want = *c;
      } else {
        if (bindings.empty()) bindings = to_bindings(symbols);
        want = sym::evaluate(t.strides[d].expr(), bindings);
      }
      if (inputs[i].stride(d) != want) return true;
    }
  }
  return false;
}

std::vector<at::Tensor> Executor::run(std::vector<at::Tensor>&& inputs) const {
  return run(std::move(inputs), {});
}

std::vector<at::Tensor> Executor::run(std::vector<at::Tensor>&& inputs,
                                      const std::vector<int64_t>& given) const {
  const bool from_caller = !given.empty() && p_.symbol_sources.has_value();
  HostStepClock clock(p_.options.debug.host_step_times, HostStep::Run);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  RECORD_USER_SCOPE("ember::graph");
  if (!(p_.specializations && !p_.symbolic_fallback.empty()) &&
      (!p_.release_inputs || p_.cuda_graph)) {
    const std::vector<at::Tensor> kept = std::move(inputs);
    return run_checked(kept, check_inputs(kept, from_caller ? &given : nullptr));
  }
  const std::vector<int64_t> symbols = check_inputs(inputs, from_caller ? &given : nullptr);
  if (runs_per_binding(inputs, symbols)) {
    return p_.specializations->get(symbols)->run(std::move(inputs));
  }
  return run_program(inputs, &inputs, symbols);
}

std::vector<int64_t> Executor::check_inputs(const std::vector<at::Tensor>& inputs,
                                            const std::vector<int64_t>* given) const {
  const graph::Graph& g = p_.traced.graph;
  EMBER_CHECK(inputs.size() == p_.input_slots.size())
      << "expected " << p_.input_slots.size() << " input tensors but got " << inputs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorType& t = g.type(p_.input_slots[i]);
    const at::Tensor& x = inputs[i];
    EMBER_CHECK(x.defined()) << "input " << i << " is an undefined tensor";
    EMBER_CHECK(tracer::to_graph(x.scalar_type()) == t.dtype && x.dim() == t.dim())
        << "input " << i << " has dtype " << x.scalar_type() << " and " << x.dim()
        << " dims, but the graph was traced for " << graph::type_str(t);
    if (p_.symbol_sources) continue;  // the sizes: bind_symbols
    for (int64_t d = 0; d < x.dim(); ++d) {
      EMBER_CHECK(x.size(d) == t.sizes[d].constant())
          << "input " << i << " has size " << x.sizes() << ", but the graph was traced for "
          << graph::type_str(t);
    }
  }
  if (!p_.symbol_sources) return {};
  return bind_symbols(g, *p_.symbol_sources, p_.input_slots, inputs, given);
}

bool Executor::size_guards_hold(const std::vector<at::Tensor>& inputs) const {
  const std::vector<sym::SizeGuard>& guards = p_.traced.size_guards;
  if (guards.empty() || !p_.symbol_sources) return true;
  const SymbolSources& s = *p_.symbol_sources;
  sym::Bindings b;
  for (size_t id = 0; id < s.source.size(); ++id) {
    const auto [i, d] = s.source[id];
    if (i < 0 && s.range[id].is_constant()) {  // pinned
      b.emplace(static_cast<sym::SymbolId>(id), s.range[id].lo);
      continue;
    }
    if (static_cast<size_t>(i) >= inputs.size() || d >= inputs[static_cast<size_t>(i)].dim()) {
      return false;
    }
    b.emplace(static_cast<sym::SymbolId>(id), inputs[static_cast<size_t>(i)].size(d));
  }
  return std::all_of(guards.begin(), guards.end(),
                     [&](const sym::SizeGuard& g) { return sym::guard_holds(g, b); });
}

namespace {

// CompileOptions::Debug::live_bytes 1 (EMBER_DEBUG_LIVE=1): the bytes of the distinct storages a
// run's values hold before each step, and the most, printed to stderr at the run's end with the
// steps around the peak (every step with 2). For finding what a program keeps alive
// (scripts/profile_model.py --mode training shows the peaks).
struct LiveBytes {
  const std::vector<at::Tensor>& env;
  bool on = false;
  bool all = false;  // every step
  int64_t peak = 0;
  int peak_step = -1;
  std::vector<int64_t> before;
  /// `level`: CompileOptions::Debug::live_bytes.
  LiveBytes(const std::vector<at::Tensor>& e, int level)
      : env(e), on(level >= 1), all(level >= 2) {}
  void note(int step) {
    if (!on) return;
    std::unordered_set<const void*> seen;
    int64_t bytes = 0;
    for (const at::Tensor& t : env) {
      if (!t.defined() || !t.has_storage()) continue;
      const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
      if (seen.insert(s).second) bytes += static_cast<int64_t>(s->nbytes());
    }
    before.push_back(bytes);
    if (bytes > peak) peak = bytes, peak_step = step;
  }
  void report(const Executor& e) const {
    if (!on || before.empty()) return;
    std::vector<std::string> steps = e.describe_steps();
    std::ostringstream os;
    os << "ember live bytes: " << steps.size() << " steps, at start " << before.front() / (1 << 20)
       << " MiB, peak " << peak / (1 << 20) << " MiB before step " << peak_step << ", at end "
       << before.back() / (1 << 20) << " MiB\n";
    const int from = all ? 0 : std::max(0, peak_step - 3);
    const int to = all ? static_cast<int>(steps.size()) : peak_step + 2;
    for (int i = from; i < std::min<int>(static_cast<int>(steps.size()), to); ++i) {
      os << "  " << i << ": " << before[i] / (1 << 20) << " MiB  " << steps[i] << "\n";
    }
    std::cerr << os.str();
  }
};

}  // namespace

std::vector<at::Tensor> Executor::run_program(const std::vector<at::Tensor>& inputs,
                                              std::vector<at::Tensor>* owned,
                                              const std::vector<int64_t>& symbols) const {
  const graph::Graph& g = p_.traced.graph;
  if (p_.unfused && !strides_match(inputs)) {
    unfused_runs_.fetch_add(1, std::memory_order_relaxed);
    return unfused_run(inputs, symbols);
  }
  std::vector<at::Tensor> reference;
  if (p_.options.debug.verify_kernels && p_.unfused && !p_.kernels.empty()) {
    reference = p_.unfused->reference_values(inputs);
  }

  std::vector<at::Tensor> env(g.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    env[p_.input_slots[i]] = owned != nullptr ? std::move((*owned)[i]) : inputs[i];
  }
  // From here on `inputs` may have been moved from (owned): read the program's values instead.
  bool inputs_gone = owned != nullptr;
  // Note [Mutations written in place]: only when no two inputs share a storage this call.
  const bool write_through = p_.num_written_through > 0 && inputs_own_their_storage(env);
  for (const auto& [value, index] : p_.constant_slots) env[value] = p_.traced.constants[index];

  torch::jit::Stack stack;
  // A symbolic program's layouts and symbolic arguments at this call's sizes (Note [Layouts per
  // binding]).
  const std::shared_ptr<const BindingLayouts> layouts =
      symbols.empty() ? nullptr : layouts_.get(p_, symbols);
  auto kernel_layouts = [&](int k) {
    return layouts ? &layouts->kernels[static_cast<size_t>(k)] : nullptr;
  };
  auto extern_args = [&](const Step& s) {
    return layouts ? &layouts->extern_args[static_cast<size_t>(&s - p_.steps.data())] : nullptr;
  };
  // The arena holds intermediates only (no output, mutation value or alias of one is placed in
  // it, and extern results that alias it are cloned), so nothing references it after the call
  // and the next call may take it over.
  CallArena arena = take_arena(layouts.get());
  struct ArenaReturn {
    const Executor& e;
    at::Tensor& memory;
    ~ArenaReturn() {
      if (!memory.defined() || !memory.is_cpu()) return;
      std::lock_guard<std::mutex> lock(e.arena_mu_);
      e.free_arenas_.push_back(std::move(memory));
    }
  } give_back{*this, arena.memory};
  LiveBytes live(env, p_.options.debug.live_bytes);
  const bool timed = p_.options.debug.host_step_times;
  for (const Step& step : p_.steps) {
    // Its host time, under its kind (runtime/host_times.h), on every way out of the iteration.
    HostStepClock clock(timed, step.kernel >= 0 ? HostStep::Kernel
                               : step.matmul    ? HostStep::Matmul
                               : step.view      ? HostStep::View
                                                : HostStep::Extern);
    live.note(p_.steps.empty() ? 0 : static_cast<int>(&step - p_.steps.data()));
    if (step.fused_into >= 0 && p_.steps[step.fused_into].fused->chosen() >= 0) {
      // The product runs inside its epilogue's step (or, if that cannot, there).
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
    if (step.kernel >= 0) {
      if (!reference.empty()) check_kernel(p_.kernels[step.kernel], reference);
      if (step.fused && run_fused_step(step, env, arena)) {
        for (graph::ValueId v : step.release) env[v].reset();
        continue;
      }
      const Kernel& kernel = p_.kernels[step.kernel];
      std::optional<std::vector<ParameterCache::Input>> key;
      if (kernel.parameter_cache) {  // under a CUDA graph too (cuda_graph.h)
        key = ParameterCache::key_of(env, kernel.inputs);
        std::lock_guard<std::mutex> lock(kernel.parameter_cache->mu);
        if (kernel.parameter_cache->key == *key) {
          for (size_t i = 0; i < kernel.outputs.size(); ++i) {
            env[kernel.outputs[i]] = kernel.parameter_cache->outputs[i];
          }
          for (graph::ValueId v : step.release) env[v].reset();
          continue;
        }
      }
      // Its launch (and, on the GPU, the argument setup around it) in the profiler's timeline;
      // a parameter kernel whose outputs were kept launches nothing and has no range (a profile
      // of BertForMaskedLM at batch 1 showed 158 ranges of weight casts that never ran).
      RECORD_USER_SCOPE(kernel.profile_name);
      if (step.fused && !env[step.matmul_operands.out].defined()) {
        // the product's step was skipped
        const Step& product = p_.steps[step.fused_product_step];
        product.call->run(env, stack, extern_args(product));
      }
      if (!run_kernel(kernel, env, arena, write_through, kernel_layouts(step.kernel))) {
        // An index tensor holds an out-of-range index. Nothing is mutated before the last step:
        // the unfused program runs the ATen ops, which raise eager's error.
        EMBER_INTERNAL_ASSERT(p_.unfused != nullptr) << "kernel step without an unfused program";
        EMBER_CHECK(!inputs_gone) << "an index is out of range in a kernel of the graph's "
                                  << "backward (ember frees its inputs as it goes, so the ATen "
                                  << "ops that would name it cannot run again)";
        return unfused_run(inputs, symbols);
      }
      if (step.fused && step.fused->chosen() == -2) decide_fused_step(step, env, stack);
      if (key) {
        std::lock_guard<std::mutex> lock(kernel.parameter_cache->mu);
        kernel.parameter_cache->key = std::move(*key);
        kernel.parameter_cache->held.clear();
        for (graph::ValueId v : kernel.inputs) {
          kernel.parameter_cache->held.push_back(env[v].storage());
        }
        std::vector<at::Tensor>& kept = kernel.parameter_cache->outputs;
        if (p_.cuda_graph && same_layouts(kept, env, kernel.outputs)) {
          // A CUDA graph's replay reads the kept tensors: the new values go into them (Note
          // [Parameter kernels outside the replay], cuda_graph.h).
          for (size_t i = 0; i < kept.size(); ++i) {
            kept[i].copy_(env[kernel.outputs[i]]);
            env[kernel.outputs[i]] = kept[i];
          }
        } else {
          kept.clear();
          for (graph::ValueId o : kernel.outputs) kept.push_back(env[o]);
        }
      }
      for (graph::ValueId v : step.release) env[v].reset();
      continue;
    }
    std::optional<at::Tensor> product;
    if (step.matmul) {
      const MatmulOperands& o = step.matmul_operands;
      product = step.matmul->run(env[o.a], env[o.b], o.bias >= 0 ? &env[o.bias] : nullptr,
                                 step.matmul_sizes, step.matmul_strides, [&] {
                                   step.call->run(env, stack, extern_args(step));
                                   return env[step.matmul_operands.out];
                                 });
    }
    if (product.has_value()) {
      env[step.matmul_operands.out] = std::move(*product);
    } else if (step.view &&
               run_view(step, env,
                        layouts ? &layouts->views[static_cast<size_t>(&step - p_.steps.data())]
                                : nullptr)) {
      // made from the root's storage
    } else {
      step.call->run(env, stack, extern_args(step));
      if (arena.memory.defined() && !step.may_alias) {
        // The plan assumed this op's results are fresh memory (its schema says so). One that
        // returns a view of an arena buffer anyway would be overwritten when the buffer is
        // reused: give it its own copy.
        for (graph::ValueId o : step.call->outputs) {
          at::Tensor& t = env[o];
          if (t.defined() && t.has_storage() &&
              t.storage().unsafeGetStorageImpl() == arena.memory.storage().unsafeGetStorageImpl()) {
            t = t.clone();
          }
        }
      }
    }
    for (graph::ValueId v : step.release) env[v].reset();
  }
  live.note(static_cast<int>(p_.steps.size()));
  live.report(*this);
  if (!g.mutations.empty()) {
    at::NoGradGuard no_grad;  // as eager updates BatchNorm's running statistics
    for (const graph::Mutation& m : g.mutations) {
      at::Tensor& target = env[m.input];
      const at::Tensor& value = env[m.value];
      if (value.unsafeGetTensorImpl() == target.unsafeGetTensorImpl()) {
        // Written in place by its kernel (Note [Mutations written in place]): what copy_ would
        // have told autograd.
        if (!target.is_inference()) target.unsafeGetTensorImpl()->bump_version();
        continue;
      }
      target.copy_(value);
    }
  }
  std::vector<at::Tensor> outs;
  outs.reserve(g.outputs.size());
  for (graph::ValueId v : g.outputs) outs.push_back(env[v]);
  return outs;
}

}  // namespace ember::runtime
