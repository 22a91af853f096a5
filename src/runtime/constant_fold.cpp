#include "runtime/constant_fold.h"

#include <ATen/core/enum_tag.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <string>
#include <variant>

#include "graph/verifier.h"
#include "runtime/collectives.h"
#include "runtime/extern_call.h"
#include "support/error.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

using graph::ValueId;

// `t` with the traced sizes and strides of `type` (a copy when the kernel chose another layout).
at::Tensor with_traced_layout(const at::Tensor& t, const graph::TensorType& type) {
  const std::vector<int64_t> sizes = graph::constant_values(type.sizes);
  const std::vector<int64_t> strides = graph::constant_values(type.strides);
  if (t.sizes() == c10::IntArrayRef(sizes) && t.strides() == c10::IntArrayRef(strides)) return t;
  at::Tensor out = at::empty_strided(sizes, strides, t.options());
  out.copy_(t);
  return out;
}

}  // namespace

bool reads_only_metadata(const graph::OpInfo& op) {
  if (!op.overload.empty()) return false;
  switch (op.kind) {
    case graph::OpKind::zeros_like:
    case graph::OpKind::ones_like:
    case graph::OpKind::full_like:
    case graph::OpKind::empty_like:
    case graph::OpKind::new_zeros:
    case graph::OpKind::new_ones:
    case graph::OpKind::new_full:
    case graph::OpKind::new_empty:
    case graph::OpKind::new_empty_strided:
      return true;
    default:
      return false;
  }
}

at::Tensor stand_in(const graph::TensorType& t) {
  return at::empty_strided(
      graph::constant_values(t.sizes), graph::constant_values(t.strides),
      at::TensorOptions().dtype(tracer::to_c10(t.dtype)).device(tracer::to_c10(t.device)));
}

int fold_constants(tracer::TracedGraph& traced, const FoldOptions& options) {
  const graph::Graph& g = traced.graph;
  // Only results of folded nodes count as constant. Tensors captured while tracing do not: they
  // may be a caller's tensors (a closure's, or a module's weights under ember.trace), updated in
  // place between calls, which the graph reads anew on every call.
  std::vector<bool> constant(g.values.size(), false);
  std::vector<bool> kept_alive(g.values.size(), false);  // a caller sees it: never folded
  for (ValueId v : g.outputs) kept_alive[v] = true;
  for (const graph::Mutation& m : g.mutations) kept_alive[m.value] = true;

  std::vector<bool> folded(g.nodes.size(), false);
  int num_folded = 0;
  std::vector<at::Tensor> env(g.values.size());
  // Folded ops run as they would in the executor: no autograd, no tracer.
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  torch::jit::Stack stack;
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    const graph::Node& n = g.nodes[ni];
    if (n.outputs.empty()) continue;
    const bool metadata_only = reads_only_metadata(g.op_of(n));
    bool ok = true;
    for (ValueId v : graph::tensor_reads(n)) {
      ok = ok && (constant[v] || (metadata_only && g.type(v).is_static()));
    }
    for (ValueId o : n.outputs) {
      const graph::TensorType& t = g.type(o);
      ok = ok && !kept_alive[o] && t.is_static() && graph::numel(t.sizes) <= options.max_elements;
    }
    if (!ok) continue;
    ExternCall call = make_extern_call(g, ni);
    const c10::OperatorHandle& op = *call.op;
    // A collective talks to the other ranks on every call (runtime/collectives.h).
    if (op.hasTag(at::Tag::nondeterministic_seeded) || op.hasTag(at::Tag::data_dependent_output) ||
        op.hasTag(at::Tag::dynamic_output_shape) || is_collective(g.op_of(n)) ||
        is_collective_wait(g.op_of(n))) {
      continue;
    }
    std::vector<std::pair<ValueId, at::Tensor>> stand_ins;
    for (ValueId v : graph::tensor_reads(n)) {
      if (!constant[v] && !env[v].defined()) {
        env[v] = stand_in(g.type(v));
        stand_ins.emplace_back(v, env[v]);
      }
    }
    call.run(env, stack);
    for (auto& [v, t] : stand_ins) env[v].reset();
    for (ValueId o : n.outputs) {
      if (!env[o].defined()) {
        ok = false;
        break;
      }
      env[o] = with_traced_layout(env[o], g.type(o));
      constant[o] = true;
    }
    EMBER_INTERNAL_ASSERT(ok) << "a folded " << g.op_of(n).qualified_name()
                              << " left an output undefined";
    folded[ni] = true;
    ++num_folded;
  }
  if (num_folded == 0) return 0;

  // Folded values that a remaining node reads become constant inputs.
  std::vector<bool> needed(g.values.size(), false);
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    if (folded[ni]) continue;
    for (ValueId v : graph::tensor_reads(g.nodes[ni])) needed[v] = true;
  }

  graph::Graph h;
  h.ops = g.ops;
  std::vector<ValueId> remap(g.values.size(), -1);
  for (const graph::Input& in : g.inputs) {
    remap[in.value] = h.add_input(g.type(in.value), in.kind, in.name);
  }
  std::vector<at::Tensor> constants = traced.constants;
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    if (!folded[ni]) continue;
    for (ValueId o : g.nodes[ni].outputs) {
      if (!needed[o]) continue;
      remap[o] = h.add_input(g.type(o), graph::InputKind::Constant,
                             "folded_" + g.op_of(g.nodes[ni]).name.substr(6));
      constants.push_back(env[o]);
    }
  }
  auto map_value = [&](ValueId v) {
    EMBER_INTERNAL_ASSERT(remap[v] >= 0) << "constant folding lost value %" << v;
    return remap[v];
  };
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    if (!folded[ni]) graph::copy_node(g, g.nodes[ni], h, remap);
  }
  for (ValueId v : g.outputs) h.outputs.push_back(map_value(v));
  for (const graph::Mutation& m : g.mutations) {
    h.mutations.push_back({map_value(m.input), map_value(m.value)});
  }
  graph::check_graph(h);
  traced.graph = std::move(h);
  traced.constants = std::move(constants);
  return num_folded;
}

}  // namespace ember::runtime
