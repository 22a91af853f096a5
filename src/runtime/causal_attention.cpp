#include "runtime/causal_attention.h"

#include <ATen/core/enum_tag.h>
#include <ATen/ops/all.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tril.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "graph/verifier.h"
#include "runtime/constant_fold.h"
#include "runtime/extern_call.h"
#include "support/error.h"

namespace ember::runtime {

namespace {

using graph::ValueId;

int arg_index(const graph::OpInfo& op, const std::string& name) {
  for (size_t i = 0; i < op.arg_names.size(); ++i) {
    if (op.arg_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

// The SDPA kernels that take a mask, and its argument's name.
const char* mask_arg_name(const graph::OpInfo& op) {
  using graph::OpKind;
  if (op.is(OpKind::_scaled_dot_product_efficient_attention) ||
      op.is(OpKind::_scaled_dot_product_cudnn_attention)) {
    return "attn_bias";
  }
  if (op.is(OpKind::_scaled_dot_product_flash_attention_for_cpu)) return "attn_mask";
  return nullptr;
}

// Whether `m` ([..., L, S], L = S) is the causal mask for every leading index.
bool is_causal_mask(const at::Tensor& m) {
  if (m.dim() < 2 || m.size(-1) != m.size(-2)) return false;
  const int64_t n = m.size(-1);
  at::Tensor lower = at::ones({n, n}, m.options().dtype(at::kBool)).tril();
  if (m.scalar_type() == at::kBool) return at::all(at::eq(m, lower)).item<bool>();
  if (!at::isFloatingType(m.scalar_type())) return false;
  double lowest = -std::numeric_limits<float>::max();
  if (m.scalar_type() == at::kDouble) lowest = std::numeric_limits<double>::lowest();
  if (m.scalar_type() == at::kHalf) lowest = -65504.0;
  if (m.scalar_type() == at::kBFloat16) lowest = -3.3895313892515355e38;
  at::Tensor allowed = at::eq(m, 0);
  at::Tensor blocked = at::logical_or(at::isneginf(m), at::eq(m, lowest));
  return at::all(at::eq(allowed, lower)).item<bool>() &&
         at::all(at::eq(blocked, at::logical_not(lower))).item<bool>();
}

}  // namespace

int causal_attention(tracer::TracedGraph& traced) {
  const graph::Graph& g = traced.graph;
  // Values computed from no graph input, by deterministic nodes (their values are the same on
  // every call): what constant folding would fold, without its size limit.
  std::vector<bool> computable(g.values.size(), false);
  std::vector<bool> node_computable(g.nodes.size(), false);
  std::vector<int32_t> candidates;
  // Python numbers the program combined with tensors are constants of the graph too (a caller's
  // tensor held as a constant may change between calls; a wrapped number cannot).
  std::vector<at::Tensor> env(g.values.size());
  {
    int ci = 0;
    for (const graph::Input& in : g.inputs) {
      if (in.kind != graph::InputKind::Constant) continue;
      const at::Tensor& t = traced.constants.at(ci++);
      if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) {
        computable[in.value] = true;
        env[in.value] = t;
      }
    }
  }
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    const graph::Node& n = g.nodes[ni];
    const graph::OpInfo& info = g.op_of(n);
    if (const char* mask_name = mask_arg_name(info)) {
      const int mi = arg_index(info, mask_name), ci = arg_index(info, "is_causal"),
                di = arg_index(info, "dropout_p");
      const auto* mask = mi >= 0 ? std::get_if<graph::ValueRef>(&n.args[mi]) : nullptr;
      const auto* causal = ci >= 0 ? std::get_if<bool>(&n.args[ci]) : nullptr;
      const auto* dropout = di >= 0 ? std::get_if<double>(&n.args[di]) : nullptr;
      if (mask && computable[mask->id] && causal && !*causal && dropout && *dropout == 0.0) {
        candidates.push_back(ni);
      }
    }
    if (n.outputs.empty()) continue;
    const bool metadata_only = reads_only_metadata(info);
    bool ok = true;
    for (ValueId v : graph::tensor_reads(n)) {
      ok = ok && (computable[v] || (metadata_only && g.type(v).is_static()));
    }
    for (ValueId o : n.outputs) ok = ok && g.type(o).is_static();
    if (!ok) continue;
    const c10::OperatorHandle op = *make_extern_call(g, ni).op;
    // (Ops of a dynamic output shape, `index` with tensors, have their traced shapes here.)
    if (op.hasTag(at::Tag::nondeterministic_seeded)) continue;
    node_computable[ni] = true;
    for (ValueId o : n.outputs) computable[o] = true;
  }
  if (candidates.empty()) return 0;

  // Evaluates the masks: each computable node they need, once, as the executor would run it.
  std::vector<ValueId> masks;
  for (int32_t ni : candidates) {
    const graph::Node& n = g.nodes[ni];
    masks.push_back(
        std::get<graph::ValueRef>(n.args[arg_index(g.op_of(n), mask_arg_name(g.op_of(n)))]).id);
  }
  const std::vector<bool> needed = graph::nodes_needed_by(g, masks);
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  torch::jit::Stack stack;
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    if (!needed[ni]) continue;
    EMBER_INTERNAL_ASSERT(node_computable[ni]) << "a causal mask reads node " << ni;
    std::vector<ValueId> stand_ins;  // what a metadata-only op reads of a graph input
    for (ValueId v : graph::tensor_reads(g.nodes[ni])) {
      if (!env[v].defined()) {
        env[v] = stand_in(g.type(v));
        stand_ins.push_back(v);
      }
    }
    make_extern_call(g, ni).run(env, stack);
    for (ValueId v : stand_ins) env[v].reset();
  }

  graph::Graph h = g;
  int rewritten = 0;
  for (int32_t ni : candidates) {
    graph::Node& n = h.nodes[ni];
    const graph::OpInfo& op = h.op_of(n);
    const int mi = arg_index(op, mask_arg_name(op));
    const at::Tensor& m = env[std::get<graph::ValueRef>(n.args[mi]).id];
    // Queries = keys (else is_causal aligns the diagonal top-left where the mask may not).
    const graph::TensorType& q = h.type(std::get<graph::ValueRef>(n.args[0]).id);
    const graph::TensorType& k = h.type(std::get<graph::ValueRef>(n.args[1]).id);
    const std::vector<int64_t> qs = graph::constant_values(q.sizes);
    const std::vector<int64_t> ks = graph::constant_values(k.sizes);
    if (!m.defined() || qs.size() < 2 || ks.size() < 2 || qs[qs.size() - 2] != ks[ks.size() - 2] ||
        m.size(-1) != ks[ks.size() - 2] || !is_causal_mask(m)) {
      continue;
    }
    n.args[mi] = graph::NoneArg{};
    n.args[arg_index(op, "is_causal")] = true;
    ++rewritten;
  }
  if (rewritten == 0) return 0;

  // Drops the computable nodes nothing reads any more (the masks' nodes), last to first.
  std::vector<int> readers(h.values.size(), 0);
  for (const graph::Node& n : h.nodes) {
    for (ValueId v : graph::tensor_reads(n)) ++readers[v];
  }
  for (ValueId v : h.outputs) ++readers[v];
  for (const graph::Mutation& mu : h.mutations) ++readers[mu.value];
  std::vector<bool> dropped(h.nodes.size(), false);
  for (int32_t ni = static_cast<int32_t>(h.nodes.size()) - 1; ni >= 0; --ni) {
    const graph::Node& n = h.nodes[ni];
    if (!node_computable[ni] || n.outputs.empty()) continue;
    bool unread = true;
    for (ValueId o : n.outputs) unread = unread && readers[o] == 0;
    if (!unread) continue;
    dropped[ni] = true;
    for (ValueId v : graph::tensor_reads(n)) --readers[v];
  }

  graph::Graph out;
  out.ops = h.ops;
  std::vector<ValueId> remap(h.values.size(), -1);
  for (const graph::Input& in : h.inputs) {
    remap[in.value] = out.add_input(h.type(in.value), in.kind, in.name);
  }
  for (int32_t ni = 0; ni < static_cast<int32_t>(h.nodes.size()); ++ni) {
    if (!dropped[ni]) graph::copy_node(h, h.nodes[ni], out, remap);
  }
  for (ValueId v : h.outputs) out.outputs.push_back(remap[v]);
  for (const graph::Mutation& mu : h.mutations) {
    out.mutations.push_back({remap[mu.input], remap[mu.value]});
  }
  graph::check_graph(out);
  traced.graph = std::move(out);
  return rewritten;
}

}  // namespace ember::runtime
