/// \file
/// The executor's memory decisions, made once per graph: outputs written into dead inputs
/// (plan_reuse), kernels of parameters whose outputs are kept across calls
/// (mark_parameter_kernels), and the per-call arena of intermediates (plan_memory).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "runtime/executor.h"
#include "runtime/executor_internal.h"
#include "runtime/pipeline.h"
#include "sched/memory_plan.h"
#include "tracer/convert.h"

namespace ember::runtime {

void plan_reuse(Program& p, const Lifetimes& life) {
  const std::vector<int>& last_use = life.last_use;
  const std::vector<int>& defined_at = life.defined_at;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    if (p.steps[s].kernel < 0) continue;
    Kernel& k = p.kernels[p.steps[s].kernel];
    for (const auto& [u, v] : k.reuse) {
      const int def = defined_at[u];
      if (last_use[u] != static_cast<int>(s) || def < 0) continue;
      const Step& producer = p.steps[def];
      if (!producer.call || producer.may_alias || producer.view) continue;
      // Nothing made between the producer and this kernel may alias u and outlive it.
      bool aliased = false;
      for (size_t t = def + 1; t <= s && !aliased; ++t) {
        const Step& step = p.steps[t];
        if (step.kernel >= 0) continue;
        std::vector<graph::ValueId> outs;
        if (!step.call) {
          if (step.view->root != u) continue;
          for (const ViewOutput& o : step.view->outputs) outs.push_back(o.value);
        } else {
          const std::vector<graph::ValueId> reads = step.call->reads();
          if (!step.may_alias || std::find(reads.begin(), reads.end(), u) == reads.end()) continue;
          outs = step.call->outputs;
        }
        for (graph::ValueId w : outs) aliased |= last_use[w] >= static_cast<int>(s);
      }
      if (aliased) continue;
      auto in = std::find(k.inputs.begin(), k.inputs.end(), u);
      auto out = std::find(k.outputs.begin(), k.outputs.end(), v);
      if (in == k.inputs.end() || out == k.outputs.end()) continue;
      k.allocations[out - k.outputs.begin()].reuse_input = static_cast<int>(in - k.inputs.begin());
      ++p.num_reused_buffers;
    }
  }
}

// Note [Mutations written in place]
// A graph that updates its inputs (an optimizer step: the parameters and their moments) computes
// each new value into a buffer of its own and copies it into the input at the end, as
// functionalization leaves it: per parameter of Adam, three more passes of reading and writing
// over the updated tensors. When the kernel that computes a mutation's value reads the input only
// at the element it writes (sched::KernelGroup::reuse, which puts the mutated input first), and
// nothing after that kernel reads the input (no step, no view of it, no aliasing ATen result),
// the kernel writes the value into the input directly and the final copy is skipped (the version
// counter is bumped instead, as copy_ would). Not when the value is also a graph output (it
// would alias the input, where eager's may not). At run time the input must have the traced
// layout and share its storage with no other input (checked per call; else a fresh buffer and
// the copy, as before).
void plan_mutation_writes(Program& p, const Lifetimes& life) {
  const std::vector<int>& defined_at = life.defined_at;
  const graph::Graph& g = p.traced.graph;
  if (g.mutations.empty()) return;
  std::vector<bool> output(g.values.size(), false);
  for (graph::ValueId v : g.outputs) output[v] = true;
  for (const graph::Mutation& m : g.mutations) {
    const int s = defined_at[m.value];
    if (s < 0 || output[m.value] || p.steps[s].kernel < 0 || p.steps[s].fused) continue;
    Kernel& k = p.kernels[p.steps[s].kernel];
    if (k.parameter_cache) continue;
    bool paired = false;
    for (const auto& [u, v] : k.reuse) paired |= u == m.input && v == m.value;
    if (!paired) continue;
    // Nothing after the kernel reads the input or anything made from it.
    bool read_later = false;
    std::vector<graph::ValueId> aliases = {m.input};
    for (size_t t = 0; t < p.steps.size() && !read_later; ++t) {
      const Step& step = p.steps[t];
      std::vector<graph::ValueId> reads;
      if (step.kernel >= 0) {
        reads = p.kernels[step.kernel].inputs;
      } else if (!step.call) {
        reads = {step.view->root};
      } else {
        reads = step.call->reads();
      }
      bool reads_alias = false;
      for (graph::ValueId r : reads) {
        reads_alias |= std::find(aliases.begin(), aliases.end(), r) != aliases.end();
      }
      if (!reads_alias) continue;
      if (t > static_cast<size_t>(s)) read_later = true;
      // Views of the input, and ATen results that may alias it, read it later through them.
      if (step.kernel < 0 && !step.call) {
        for (const ViewOutput& o : step.view->outputs) aliases.push_back(o.value);
      } else if (step.kernel < 0 && step.may_alias) {
        aliases.insert(aliases.end(), step.call->outputs.begin(), step.call->outputs.end());
      }
    }
    for (graph::ValueId a : aliases) read_later |= output[a] && a != m.input;
    if (read_later) continue;
    auto in = std::find(k.inputs.begin(), k.inputs.end(), m.input);
    auto out = std::find(k.outputs.begin(), k.outputs.end(), m.value);
    if (in == k.inputs.end() || out == k.outputs.end()) continue;
    Kernel::Output& alloc = k.allocations[out - k.outputs.begin()];
    alloc.reuse_input = static_cast<int>(in - k.inputs.begin());
    alloc.write_through = true;
    alloc.arena_slot = -1;
    ++p.num_written_through;
  }
}

bool Executor::inputs_own_their_storage(const std::vector<at::Tensor>& env) const {
  std::vector<const c10::StorageImpl*> storages;
  storages.reserve(p_.input_slots.size());
  for (graph::ValueId v : p_.input_slots) {
    if (env[v].defined() && env[v].has_storage()) {
      storages.push_back(env[v].storage().unsafeGetStorageImpl());
    }
  }
  std::sort(storages.begin(), storages.end());
  return std::adjacent_find(storages.begin(), storages.end()) == storages.end();
}

void mark_parameter_kernels(Program& p) {
  const graph::Graph& g = p.traced.graph;
  std::vector<bool> parameter(g.values.size(), false), kept_out(g.values.size(), false);
  for (const graph::Input& in : g.inputs) {
    parameter[in.value] = graph::is_module_state(in.kind);
  }
  for (const graph::Mutation& m : g.mutations) {
    parameter[m.input] = false;  // the graph writes it: never a cache key
    kept_out[m.value] = true;
  }
  for (graph::ValueId v : g.outputs) kept_out[v] = true;  // the caller may write it
  for (const Step& step : p.steps) {
    if (step.kernel < 0 || step.fused) continue;
    Kernel& k = p.kernels[step.kernel];
    if (k.inputs.empty() || k.index_status) continue;
    bool only_parameters = true;
    for (graph::ValueId v : k.inputs) only_parameters = only_parameters && parameter[v];
    for (graph::ValueId v : k.outputs) only_parameters = only_parameters && !kept_out[v];
    if (only_parameters) k.parameter_cache = std::make_shared<ParameterCache>();
  }
}

int Executor::num_parameter_kernels() const {
  int n = 0;
  for (const Kernel& k : p_.kernels) n += k.parameter_cache ? 1 : 0;
  return n;
}

int64_t layout_bytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                     int64_t itemsize) {
  int64_t extent = 1;  // elements the strided layout spans
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    extent += (sizes[d] - 1) * strides[d];
  }
  return extent * itemsize;
}

// Note [An arena over shape symbols]
// A kernel output that lives inside a call takes a slot of the call's arena. In a static program
// every slot's size is known and the arena is planned once. In a program over shape symbols a
// slot's sizes and strides are expressions: the slots and their lifetimes are kept, and each
// call evaluates their sizes under its bindings and plans the arena (sched::plan_arena, a few
// slots: well under a microsecond), or takes the last call's plan when the sizes are the same.
// The memory is a finished call's arena when that is large enough, so a server's calls at
// varying lengths settle on the largest one's arena. Without it each output was an allocation of
// its own per call: at small sizes on the CPU a GPT-2 layer's symbolic graph made 9 allocations a
// call where its static program made 1.
//
// Note [An arena on the GPU]
// Triton kernels' intermediates share one arena too: at batch 1 a call is bound by the host, and
// each output of its own was a call of at::empty_strided through the dispatcher and the caching
// allocator (a BERT layer stack: 112 of them among 175 launches). The arena is one allocation of
// the caching allocator per call, freed at the call's end, and not pooled across calls as host
// arenas are: the allocator orders a freed block's reuse after the work queued on its stream, so
// a next call on another stream (or a CUDA graph's private pool, under capture) cannot take memory
// that this call's kernels still read or write. Offsets are multiples of kArenaAlignment (64
// bytes), so a Triton kernel's pointers keep the 16-byte alignment it was specialized for.
// The arena is reserved for the whole call, while extern results (convolutions, products) take
// blocks of their own: where the kernels' intermediates peak at another time than the externs'
// the arena plus the externs' peak is above what blocks per buffer would hold (dpn98 at the
// harness's batch: 1.28x of eager's peak with the arena, 1.16x in the sweep before it). Such a
// graph (arena_raises_peak, by more than the caching allocator's 2 MiB granularity) keeps a
// block per output; at batch 1 the difference is below that and the arena stays.
namespace {

// Note [An arena on the GPU]: whether one arena for the call's kernel outputs (`slots`, placed in
// `arena_bytes`) would raise the call's peak above that of a block per output by more than the
// caching allocator's own granularity (2 MiB). Both estimates count the kernel outputs and the
// fresh results of extern steps that live inside the call, at their sizes, step by step: with
// blocks of their own, the peak of their sum; with the arena, the arena plus the externs' peak.
bool arena_raises_peak(const Program& p, const Lifetimes& life,
                       const std::vector<sched::BufferLifetime>& slots, int64_t arena_bytes) {
  const int keep = static_cast<int>(p.steps.size());
  std::vector<int64_t> kernels(p.steps.size() + 1, 0), externs(p.steps.size() + 1, 0);
  auto live = [&](std::vector<int64_t>& delta, int64_t bytes, int first, int last) {
    delta[static_cast<size_t>(first)] += bytes;
    delta[static_cast<size_t>(std::min(last, keep - 1)) + 1] -= bytes;
  };
  for (const sched::BufferLifetime& b : slots) live(kernels, b.bytes, b.first, b.last);
  const graph::Graph& g = p.traced.graph;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    if (!step.call || step.may_alias) continue;  // views of what they read take no memory
    for (graph::ValueId v : step.call->outputs) {
      if (life.last_use[v] >= keep) continue;  // outlives the call: the same either way
      const graph::TensorType& t = g.type(v);
      int64_t numel = 1;
      bool known = true;
      for (const graph::DimExpr& d : t.sizes) {
        std::optional<int64_t> c = d.as_constant();
        known = known && c.has_value();
        numel *= c.value_or(0);
      }
      if (!known) continue;
      const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(tracer::to_c10(t.dtype)));
      live(externs, bytes, static_cast<int>(s), std::max(life.last_use[v], static_cast<int>(s)));
    }
  }
  int64_t k = 0, e = 0, blocks_peak = 0, externs_peak = 0;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    k += kernels[s];
    e += externs[s];
    blocks_peak = std::max(blocks_peak, k + e);
    externs_peak = std::max(externs_peak, e);
  }
  constexpr int64_t kAllocatorGranularity = int64_t{2} << 20;
  return arena_bytes + externs_peak > blocks_peak + kAllocatorGranularity;
}

}  // namespace

void plan_memory(Program& p, const Lifetimes& life) {
  const std::vector<int>& last_use = life.last_use;
  const graph::Graph& g = p.traced.graph;
  const int keep = static_cast<int>(p.steps.size());
  // Which arena candidates each value aliases: a kernel output is its own candidate; the results
  // of an op whose schema returns aliases (views) alias every tensor it reads.
  std::vector<std::vector<int>> aliases(g.values.size());
  std::vector<Program::ArenaSlot> candidates;
  std::vector<std::pair<int, size_t>> where;  // candidate -> (kernel, output)
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& step = p.steps[s];
    if (step.kernel >= 0) {
      const Kernel& k = p.kernels[step.kernel];
      if (k.parameter_cache) continue;  // kept across calls: never in the per-call arena
      for (size_t i = 0; i < k.outputs.size(); ++i) {
        const Kernel::Output& out = k.allocations[i];
        if (out.reuse_input >= 0 || out.unused) continue;  // in a dead input's memory, or none
        Program::ArenaSlot slot;
        if (k.symbolic) {
          // Sizes over shape symbols: the arena is planned per call (Executor::arena_plan).
          std::tie(slot.sizes, slot.strides) = k.symbolic_outputs[i];
        } else {
          slot.sizes.assign(out.sizes.begin(), out.sizes.end());
          slot.strides.assign(out.strides.begin(), out.strides.end());
        }
        slot.itemsize = static_cast<int64_t>(out.options.dtype().itemsize());
        slot.first = slot.last = static_cast<int32_t>(s);
        aliases[k.outputs[i]] = {static_cast<int>(candidates.size())};
        candidates.push_back(std::move(slot));
        where.emplace_back(step.kernel, i);
      }
      continue;
    }
    if (!step.call) {  // a view step: its views alias the root
      for (const ViewOutput& o : step.view->outputs) aliases[o.value] = aliases[step.view->root];
      continue;
    }
    if (!step.may_alias) continue;
    std::vector<int> read;
    for (graph::ValueId v : step.call->reads()) {
      read.insert(read.end(), aliases[v].begin(), aliases[v].end());
    }
    for (graph::ValueId o : step.call->outputs) aliases[o] = read;
  }
  if (candidates.empty()) return;
  // A candidate lives until the last use of anything aliasing it; one that a caller can see
  // (a graph output, a value written back into an input, or their aliases) gets its own memory.
  std::vector<bool> excluded(candidates.size(), false);
  for (graph::ValueId v : g.outputs) {
    for (int c : aliases[v]) excluded[c] = true;
  }
  for (const graph::Mutation& m : g.mutations) {
    for (int c : aliases[m.value]) excluded[c] = true;
  }
  for (size_t v = 0; v < aliases.size(); ++v) {
    for (int c : aliases[v]) {
      if (last_use[v] >= keep) excluded[c] = true;
      candidates[c].last = std::max(candidates[c].last, static_cast<int32_t>(last_use[v]));
    }
  }
  auto constant = [](const graph::Dims& dims) {
    std::vector<int64_t> out;
    for (const graph::DimExpr& d : dims) {
      std::optional<int64_t> c = d.as_constant();
      if (!c) return std::optional<std::vector<int64_t>>();
      out.push_back(*c);
    }
    return std::optional<std::vector<int64_t>>(std::move(out));
  };
  std::vector<sched::BufferLifetime> lifetimes;  // of the slots, when every size is a constant
  bool all_constant = true;
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (excluded[c]) continue;
    const Program::ArenaSlot& slot = candidates[c];
    std::optional<std::vector<int64_t>> sizes = constant(slot.sizes);
    std::optional<std::vector<int64_t>> strides = constant(slot.strides);
    int64_t bytes = -1;
    if (sizes && strides) {
      bytes = layout_bytes(*sizes, *strides, slot.itemsize);
      // Empty buffers need no arena space (and an arena of 0 bytes would not be allocated).
      if (bytes == 0) continue;
    }
    auto [kernel, output] = where[c];
    const c10::Device device = p.kernels[kernel].allocations[output].options.device();
    // One arena, on one device: an output on another (none is expected) keeps its own memory.
    if (!p.arena_slots.empty() && device != p.arena_device) continue;
    all_constant &= bytes >= 0;
    lifetimes.push_back({std::max<int64_t>(bytes, 0), slot.first, slot.last});
    p.kernels[kernel].allocations[output].arena_slot = static_cast<int>(p.arena_slots.size());
    p.arena_device = device;
    p.arena_slots.push_back(slot);
  }
  if (p.arena_slots.empty()) return;
  if (all_constant) p.arena_plan = sched::plan_arena(lifetimes, kArenaAlignment);
  if (p.arena_plan && !p.arena_device.is_cpu() &&
      arena_raises_peak(p, life, lifetimes, p.arena_plan->total_bytes)) {
    // Note [An arena on the GPU]: every kernel output its own block again.
    for (Kernel& k : p.kernels) {
      for (Kernel::Output& out : k.allocations) out.arena_slot = -1;
    }
    p.arena_slots.clear();
    p.arena_plan.reset();
  }
}

}  // namespace ember::runtime
