#include "graph/partition.h"

#include <algorithm>
#include <functional>
#include <string>
#include <variant>

#include "graph/max_flow.h"
#include "graph/verifier.h"
#include "support/error.h"
#include "sym/eval.h"

namespace ember::graph {

namespace {

// The elements of value `v`; over shape symbols, at the symbols' hints (the sizes the trace saw).
int64_t hint_numel(const Graph& g, ValueId v) {
  int64_t n = 1;
  for (const DimExpr& d : g.type(v).sizes) {
    std::optional<int64_t> c = d.as_constant();
    n *= c ? *c : sym::hint(d.expr(), g.symbols);
  }
  return n;
}

int64_t value_bytes(const Graph& g, ValueId v) {
  const TensorType& t = g.type(v);
  if (t.is_static()) return nbytes(t);
  return std::max<int64_t>(hint_numel(g, v) * element_size(t.dtype), 1);
}

// Note [Recompute reads few large tensors]
// A residual stream is a chain of adds, h_k = h_{k-1} + o_k, each h_k read by its layer's norm in
// the backward. In bytes the cheapest cut saves h_0 and every o_k (bf16 matmul outputs, half an
// f32 h_k each) and recomputes the h_k, but the last layer's norm comes first in the backward and
// needs h_L: its recompute reads every o_k and computes every prefix sum, which the scheduler
// then writes at once for the other layers (ViT-B bf16: one kernel reading 25 tensors and writing
// 22 f32 ones, 2.6 GB, all alive from the backward's start; Llama's head: 17). So a recomputed
// value may read at most kMaxRecomputeLargeReads large tensors (at least half its elements) among
// the saved values and primals; past that, the first value of the chain that would exceed it is
// computed in the forward and saved (banned from recompute), and the cut is made again. The chain
// then saves every third h_k and recomputes the two in between from it and their o_k.
constexpr int kMaxRecomputeLargeReads = 3;
constexpr int kMaxBanRounds = 8;

// Note [Narrow casts run in the forward]
// Only values the forward computes are candidates of the min cut; a value the backward computes
// from them without a tangent is computed there. A cast to a one-byte integer type that reads no
// tangent (a max pool's window offsets, Note [Max-pool indices saved as window offsets] in
// rewrite/pool_offsets.h) is computed in the forward instead, with what it reads: the min cut may
// then save it (a byte an element) where the backward would read the wide values it comes from.
bool narrow_cast(const Graph& g, const Node& n) {
  if (g.op_of(n).kind != OpKind::_to_copy || n.outputs.size() != 1) return false;
  const DType t = g.type(n.outputs[0]).dtype;
  return element_size(t) == 1 && !is_floating(t);
}

// The min-cut rematerialization partition (AOTAutograd's): over the forward side's values, each
// split into an in and an out node joined by an edge of its size in bytes; the source feeds the
// primals and the nodes that may not be recomputed, every data dependency is an uncuttable edge,
// and each value the backward reads feeds the sink. A minimum cut is the cheapest set of values
// to save: the forward values past it are recomputed in the backward. Returns the forward nodes
// to recompute (nodes whose values are in `banned` are never recomputed; values in `pinned` are
// neither recomputed nor saved).
std::vector<bool> min_cut_recompute(
    const Graph& g, const std::vector<bool>& forward_side, const std::vector<bool>& forward,
    const std::function<bool(const Graph&, const Node&)>& recomputable,
    const std::vector<bool>& required, const std::vector<bool>& backward,
    const std::vector<bool>& banned, const std::vector<bool>& pinned) {
  const int num_values = static_cast<int>(g.values.size());
  const int source = 2 * num_values, sink = source + 1;
  FlowNetwork net(sink + 1);
  auto in = [](ValueId v) { return 2 * v; };
  auto out = [](ValueId v) { return 2 * v + 1; };
  for (ValueId v = 0; v < num_values; ++v) {
    if (!forward_side[v]) continue;
    net.add_edge(in(v), out(v), pinned[v] ? FlowNetwork::kInfinite : value_bytes(g, v));
    const int32_t p = g.values[v].node;
    if (p < 0 || banned[v] || pinned[v] || !recomputable(g, g.nodes[p])) {
      net.add_edge(source, in(v), FlowNetwork::kInfinite);
    }
    if (p >= 0) {
      for (ValueId r : tensor_reads(g.nodes[p])) {
        if (forward_side[r]) net.add_edge(out(r), in(v), FlowNetwork::kInfinite);
      }
    }
  }
  for (ValueId v = 0; v < num_values; ++v) {
    if (required[v]) net.add_edge(out(v), sink, FlowNetwork::kInfinite);
  }
  net.max_flow(source, sink);
  const std::vector<bool> side = net.source_side(source);
  // Walk back from the required values: a value past the cut is recomputed by its node.
  std::vector<bool> recompute(g.nodes.size(), false);
  std::vector<ValueId> todo;
  for (ValueId v = 0; v < num_values; ++v) {
    if (required[v]) todo.push_back(v);
  }
  while (!todo.empty()) {
    const ValueId v = todo.back();
    todo.pop_back();
    const int32_t p = g.values[v].node;
    if (p < 0 || backward[p] || recompute[p] || !forward_side[v]) continue;
    if (side[in(v)] && !side[out(v)]) continue;  // saved
    EMBER_INTERNAL_ASSERT(!side[in(v)]) << "min cut: value %" << v << " is neither saved nor "
                                        << "recomputable";
    recompute[p] = true;
    for (ValueId r : tensor_reads(g.nodes[p])) todo.push_back(r);
  }
  return recompute;
}

// Values whose recompute reads too many large tensors (Note [Recompute reads few large
// tensors]), each the first of its chain: values in graph order, each with the large saved values
// and primals its recompute reads (up to one past the limit), a banned one counting as saved.
std::vector<ValueId> over_read(const Graph& g, const std::vector<bool>& recompute) {
  std::vector<std::vector<ValueId>> reads(g.values.size());
  std::vector<ValueId> out;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (!recompute[ni]) continue;
    const Node& n = g.nodes[ni];
    for (ValueId o : n.outputs) {
      const int64_t half = hint_numel(g, o) / 2;
      std::vector<ValueId> large;
      auto add = [&](ValueId r) {
        if (hint_numel(g, r) >= half && large.size() <= kMaxRecomputeLargeReads &&
            std::find(large.begin(), large.end(), r) == large.end()) {
          large.push_back(r);
        }
      };
      for (ValueId r : tensor_reads(n)) {
        const int32_t p = g.values[r].node;
        if (p >= 0 && recompute[p]) {
          for (ValueId x : reads[r]) add(x);
        } else {
          add(r);
        }
      }
      if (large.size() > kMaxRecomputeLargeReads) {
        out.push_back(o);
        reads[o] = {};  // saved from now on: its readers read it alone
        continue;
      }
      reads[o] = std::move(large);
    }
  }
  return out;
}

// Note [Values the backward writes anyway are saved]
// Recomputing a value is free when the kernels that read it compute it inline. A matrix product
// or convolution of the backward reads it from memory: recomputed, it is written there (GELU's
// output for fc2's weight gradient in ViT-B: its input read and it written, 295 MB a layer), where
// saving it costs only memory (the forward wrote it for its own product). Such values are banned
// from recompute (Inductor's partitioner does the same: is_materialized_backwards): a training
// step spends less time, and its peak grows by what is saved, staying under Inductor's.
// EMBER_SAVE_MATERIALIZED=0 turns it off.
std::vector<bool> materialized_in_backward(const Graph& g, const std::vector<bool>& forward_side,
                                           const std::vector<bool>& backward,
                                           const SplitOptions& options) {
  std::vector<bool> out(g.values.size(), false);
  if (!options.reads_memory || !options.is_view) return out;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    if (!backward[ni] || !options.reads_memory(g, n)) continue;
    for (ValueId r : tensor_reads(n)) {
      // Through views: to the value they alias.
      while (g.values[r].node >= 0 && options.is_view(g, g.nodes[g.values[r].node])) {
        const std::vector<ValueId> in = tensor_reads(g.nodes[g.values[r].node]);
        if (in.empty()) break;
        r = in[0];
      }
      const int32_t p = g.values[r].node;
      if (p >= 0 && forward_side[r] && options.recomputable(g, g.nodes[p]) &&
          !(options.recompute_for_memory && options.recompute_for_memory(g, g.nodes[p]))) {
        out[r] = true;
      }
    }
  }
  return out;
}

// Note [Inputs the forward modifies stay in the forward]
// The forward applies the graph's input mutations when it ends (BatchNorm's running statistics,
// an activation the program modified in place: Note [Traced inputs modified in place] in
// tracer/grad_inputs.h), so in the backward such an input holds its new value. Its old value, or
// a view of it, may then be neither saved (the saved tensor is the input, or aliases it) nor read
// by a recompute: the min cut places its cut past them (the values the forward computes from
// them are saved or recomputed from what is). The backward's own nodes never read them: they
// read what autograd saved, and eager's version counter forbids saving a tensor that is then
// modified in place.
std::vector<bool> modified_inputs_and_views(const Graph& g) {
  std::vector<bool> out(g.values.size(), false);
  for (const Mutation& m : g.mutations) out[m.input] = true;
  for (const Node& n : g.nodes) {
    if (!is_view_op(g.op_of(n).kind)) continue;
    const std::vector<ValueId> reads = tensor_reads(n);
    if (reads.empty() || !out[reads[0]]) continue;
    for (ValueId o : n.outputs) out[o] = true;
  }
  return out;
}

// Marks in `backward` the forward nodes to recompute: min_cut_recompute, with values banned from
// recompute until no recompute reads too much (Note [Recompute reads few large tensors]).
void recompute_by_min_cut(const Graph& g, const std::vector<bool>& forward_side,
                          const std::vector<bool>& forward, const SplitOptions& options,
                          std::vector<bool>& backward) {
  const auto& recomputable = options.recomputable;
  const int num_values = static_cast<int>(g.values.size());
  // Note [Inputs the forward modifies stay in the forward]
  const std::vector<bool> pinned = modified_inputs_and_views(g);
  // What the backward's own nodes and the gradients read of the forward side (a program output
  // that is an input the forward modifies is the input itself, not read by the backward).
  std::vector<bool> required(num_values, false);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (!backward[ni]) continue;
    for (ValueId r : tensor_reads(g.nodes[ni])) required[r] = required[r] || forward_side[r];
  }
  for (ValueId v : g.outputs) {
    const int32_t p = g.values[v].node;
    if (forward_side[v] && (p < 0 || !forward[p]) && !pinned[v]) required[v] = true;
  }
  std::vector<bool> banned = materialized_in_backward(g, forward_side, backward, options);
  for (ValueId v = 0; v < num_values; ++v) {
    EMBER_UNSUPPORTED(!(pinned[v] && required[v]))
        << "the backward reads %" << v << ", an input the forward modifies in place (or a view "
        << "of one)";
  }
  std::vector<bool> recompute;
  for (int round = 0;; ++round) {
    recompute = min_cut_recompute(g, forward_side, forward, recomputable, required, backward,
                                  banned, pinned);
    const std::vector<ValueId> over =
        round < kMaxBanRounds ? over_read(g, recompute) : std::vector<ValueId>{};
    if (over.empty()) break;
    for (ValueId v : over) banned[v] = true;
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) backward[ni] = backward[ni] || recompute[ni];
}

}  // namespace

JointSplit split_joint(const Graph& g, const std::vector<bool>& is_tangent, int num_forward_outputs,
                       const SplitOptions& options) {
  EMBER_INTERNAL_ASSERT(is_tangent.size() == g.inputs.size())
      << "split_joint: " << is_tangent.size() << " tangent flags for " << g.inputs.size()
      << " inputs";
  EMBER_INTERNAL_ASSERT(num_forward_outputs >= 0 &&
                        num_forward_outputs <= static_cast<int>(g.outputs.size()))
      << "split_joint: " << num_forward_outputs << " forward outputs of " << g.outputs.size();

  enum class From : int8_t { Primal, Constant, Tangent, Forward, Backward };
  std::vector<From> from(g.values.size(), From::Forward);
  std::vector<int> constant_index(g.values.size(), -1);
  int num_constants = 0;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Input& in = g.inputs[i];
    if (in.kind == InputKind::Constant) {
      EMBER_INTERNAL_ASSERT(!is_tangent[i]) << "split_joint: a constant tangent";
      from[in.value] = From::Constant;
      constant_index[in.value] = num_constants++;
    } else {
      from[in.value] = is_tangent[i] ? From::Tangent : From::Primal;
    }
  }
  const std::vector<ValueId> forward_roots(g.outputs.begin(),
                                           g.outputs.begin() + num_forward_outputs);
  // Input mutations (BatchNorm's running statistics) happen in the forward: their values are
  // forward roots too.
  std::vector<ValueId> forward_needs = forward_roots;
  for (const Mutation& m : g.mutations) {
    EMBER_INTERNAL_ASSERT(from[m.input] == From::Primal) << "split_joint: a mutated tangent";
    forward_needs.push_back(m.value);
  }
  std::vector<bool> reads_tangent(g.values.size(), false);
  for (size_t i = 0; i < g.inputs.size(); ++i) reads_tangent[g.inputs[i].value] = is_tangent[i];
  for (const Node& n : g.nodes) {
    bool t = false;
    for (ValueId r : tensor_reads(n)) t = t || reads_tangent[r];
    for (ValueId o : n.outputs) reads_tangent[o] = t;
  }
  if (options.recomputable) {
    for (const Node& n : g.nodes) {
      if (narrow_cast(g, n) && !reads_tangent[n.outputs[0]]) forward_needs.push_back(n.outputs[0]);
    }
  }
  const std::vector<bool> forward = nodes_needed_by(g, forward_needs);
  std::vector<ValueId> all_roots = g.outputs;
  all_roots.insert(all_roots.end(), forward_needs.begin(), forward_needs.end());
  const std::vector<bool> any = nodes_needed_by(g, all_roots);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const bool t = !n.outputs.empty() && reads_tangent[n.outputs[0]];
    for (ValueId o : n.outputs) from[o] = forward[ni] ? From::Forward : From::Backward;
    EMBER_INTERNAL_ASSERT(!(forward[ni] && t))
        << "split_joint: the program's outputs read a tangent (node " << ni << ", "
        << g.op_of(n).qualified_name() << ")";
  }
  for (ValueId v : forward_roots) {
    EMBER_INTERNAL_ASSERT(from[v] != From::Tangent) << "split_joint: a tangent is an output";
  }

  // Nodes of the backward: those the gradients need that the forward does not compute, and (with
  // `recomputable`) forward nodes recomputed there from saved values.
  std::vector<bool> backward(g.nodes.size(), false);
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) backward[ni] = any[ni] && !forward[ni];
  if (options.recomputable) {
    std::vector<bool> forward_side(g.values.size(), false);
    for (size_t v = 0; v < g.values.size(); ++v) {
      forward_side[v] = from[v] == From::Primal || from[v] == From::Forward;
    }
    recompute_by_min_cut(g, forward_side, forward, options, backward);
  }

  {  // Note [Inputs the forward modifies stay in the forward]
    const std::vector<bool> pinned = modified_inputs_and_views(g);
    for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
      if (!backward[ni]) continue;
      for (ValueId r : tensor_reads(g.nodes[ni])) {
        const int32_t p = g.values[r].node;
        EMBER_UNSUPPORTED(!pinned[r] || (p >= 0 && backward[p]))
            << "the backward reads %" << r << ", an input the forward modifies in place (or a "
            << "view of one)";
      }
    }
  }

  // What the backward reads of the forward side, in order of first read.
  std::vector<ValueId> saved;
  std::vector<bool> is_saved(g.values.size(), false);
  std::vector<ValueId> backward_constant_values;
  std::vector<bool> in_backward_constants(g.values.size(), false);
  auto backward_reads = [&](ValueId v) {
    const int32_t p = g.values[v].node;
    if (p >= 0 && backward[p]) return;  // computed in the backward
    if ((from[v] == From::Forward || from[v] == From::Primal) && !is_saved[v]) {
      is_saved[v] = true;
      saved.push_back(v);
    } else if (from[v] == From::Constant && !in_backward_constants[v]) {
      in_backward_constants[v] = true;
      backward_constant_values.push_back(v);
    }
  };
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (!backward[ni]) continue;
    for (ValueId r : tensor_reads(g.nodes[ni])) backward_reads(r);
  }
  for (size_t i = num_forward_outputs; i < g.outputs.size(); ++i) backward_reads(g.outputs[i]);

  JointSplit out;
  // The forward: primals in, the program's outputs and the saved intermediates out.
  Graph& f = out.forward;
  f.ops = g.ops;
  f.symbols = g.symbols;
  std::vector<ValueId> fmap(g.values.size(), -1);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Input& in = g.inputs[i];
    if (is_tangent[i]) continue;
    fmap[in.value] = f.add_input(g.type(in.value), in.kind, in.name);
    if (in.kind == InputKind::Constant) out.forward_constants.push_back(constant_index[in.value]);
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (forward[ni]) copy_node(g, g.nodes[ni], f, fmap);
  }
  for (ValueId v : forward_roots) {
    EMBER_INTERNAL_ASSERT(fmap[v] >= 0) << "split_joint: forward output %" << v << " undefined";
    f.outputs.push_back(fmap[v]);
  }
  for (const Mutation& m : g.mutations) f.mutations.push_back({fmap[m.input], fmap[m.value]});
  for (ValueId v : saved) {
    out.saved_bytes += value_bytes(g, v);
    if (from[v] == From::Forward) {
      f.outputs.push_back(fmap[v]);
      out.saved_inputs.push_back(-1);
    } else {
      for (size_t i = 0; i < g.inputs.size(); ++i) {
        if (g.inputs[i].value == v) out.saved_inputs.push_back(static_cast<int>(i));
      }
    }
  }

  // The backward: saved values, tangents and its constants in; the gradients out.
  Graph& b = out.backward;
  b.ops = g.ops;
  b.symbols = g.symbols;
  std::vector<ValueId> bmap(g.values.size(), -1);
  for (size_t i = 0; i < saved.size(); ++i) {
    bmap[saved[i]] = b.add_input(g.type(saved[i]), InputKind::User, "saved" + std::to_string(i));
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Input& in = g.inputs[i];
    if (is_tangent[i]) bmap[in.value] = b.add_input(g.type(in.value), in.kind, in.name);
  }
  for (ValueId v : backward_constant_values) {
    bmap[v] = b.add_input(g.type(v), InputKind::Constant, g.inputs[g.values[v].index].name);
    out.backward_constants.push_back(constant_index[v]);
  }
  // Nodes that read no tangent (forward nodes recomputed, a weight's transpose) go just before
  // their first reader, not at the backward's start: recomputed in joint order, every recomputed
  // activation would be alive from the backward's start to its use, and the backward would peak
  // at the saved values plus all of them (about eager's peak, with only half of eager's
  // activations saved). Nodes that read a tangent keep the joint's order.
  std::vector<bool> emitted(g.nodes.size(), false);
  std::function<void(int32_t)> emit = [&](int32_t ni) {
    if (emitted[ni]) return;
    emitted[ni] = true;
    for (ValueId r : tensor_reads(g.nodes[ni])) {
      const int32_t p = g.values[r].node;
      if (p >= 0 && backward[p]) emit(p);
    }
    copy_node(g, g.nodes[ni], b, bmap);
  };
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (!backward[ni]) continue;
    bool tangent = false;
    for (ValueId o : g.nodes[ni].outputs) tangent = tangent || reads_tangent[o];
    if (tangent) emit(static_cast<int32_t>(ni));
  }
  for (size_t i = num_forward_outputs; i < g.outputs.size(); ++i) {
    const int32_t p = g.values[g.outputs[i]].node;
    if (p >= 0 && backward[p]) emit(p);
  }
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    if (backward[ni]) emit(static_cast<int32_t>(ni));  // none left, by construction
  }
  for (size_t i = num_forward_outputs; i < g.outputs.size(); ++i) {
    const ValueId v = g.outputs[i];
    EMBER_INTERNAL_ASSERT(bmap[v] >= 0) << "split_joint: gradient %" << v << " undefined";
    b.outputs.push_back(bmap[v]);
  }
  check_graph(f);
  check_graph(b);
  return out;
}

}  // namespace ember::graph
