#include "runtime/bias_apart.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <utility>
#include <vector>

#include "graph/verifier.h"
#include "sched/index_ops.h"
#include "sched/node_args.h"
#include "sched/pointwise.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

using graph::ValueId;

bool is_one(const graph::Arg* a) {
  if (a == nullptr) return false;
  if (const auto* i = std::get_if<int64_t>(a)) return *i == 1;
  if (const auto* d = std::get_if<double>(a)) return *d == 1.0;
  return false;
}

// The bias of addmm node `n` when it is one value per result column of the result's dtype and
// alpha = beta = 1; nullopt otherwise.
std::optional<ValueId> column_bias(const graph::Graph& g, const graph::Node& n) {
  const graph::OpInfo& op = g.op_of(n);
  if (!op.is(graph::OpKind::addmm) || n.outputs.size() != 1 ||
      n.args.size() != op.arg_names.size()) {
    return std::nullopt;
  }
  if (!is_one(sched::node_arg(g, n, "beta")) || !is_one(sched::node_arg(g, n, "alpha"))) {
    return std::nullopt;
  }
  const graph::Arg* self = sched::node_arg(g, n, "self");
  const auto* bias = self ? std::get_if<graph::ValueRef>(self) : nullptr;
  if (bias == nullptr) return std::nullopt;
  const graph::TensorType& out = g.type(n.outputs[0]);
  const graph::TensorType& b = g.type(bias->id);
  if (out.dim() != 2 || b.dtype != out.dtype || b.device != out.device) return std::nullopt;
  const bool row = b.dim() == 1 && b.sizes[0] == out.sizes[1];
  const bool row2d = b.dim() == 2 && b.sizes[0].is_constant() && b.sizes[0].constant() == 1 &&
                     b.sizes[1] == out.sizes[1];
  if (!row && !row2d) return std::nullopt;
  return bias->id;
}

}  // namespace

int bias_apart(tracer::TracedGraph& traced) {
  const graph::Graph& g = traced.graph;
  // Readers of each value; graph outputs and mutation values are read by "something else".
  std::vector<std::vector<int32_t>> readers(g.values.size());
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    for (ValueId v : graph::tensor_reads(g.nodes[i])) readers[v].push_back(i);
  }
  std::vector<bool> escapes(g.values.size(), false);
  for (ValueId v : g.outputs) escapes[v] = true;
  for (const graph::Mutation& m : g.mutations) escapes[m.value] = true;
  // Whether `root` is read, and every use of it, through views, is a pointwise node's.
  auto read_pointwise = [&](ValueId root) {
    if (readers[root].empty()) return false;
    std::vector<ValueId> stack = {root};
    while (!stack.empty()) {
      const ValueId v = stack.back();
      stack.pop_back();
      if (escapes[v]) return false;
      for (int32_t r : readers[v]) {
        const graph::Node& n = g.nodes[r];
        if (sched::is_pointwise(g, n)) continue;
        // (A view over shape symbols reads a realized root: the add would be a kernel of its own.)
        if (sched::index_op_kind(g, n) == sched::IndexOpKind::View &&
            !sched::needs_realized_input(g, n)) {
          for (ValueId o : n.outputs) stack.push_back(o);
          continue;
        }
        return false;
      }
    }
    return true;
  };
  std::vector<std::optional<ValueId>> bias_of(g.nodes.size());
  int found = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    std::optional<ValueId> b = column_bias(g, g.nodes[i]);
    if (b && read_pointwise(g.nodes[i].outputs[0])) {
      bias_of[i] = b;
      ++found;
    }
  }
  if (found == 0) return 0;

  static const c10::OperatorHandle mm =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
  static const c10::OperatorHandle add =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor");
  graph::Graph out;
  out.ops = g.ops;
  out.symbols = g.symbols;
  const int32_t mm_op = out.intern_op(tracer::op_info(mm.schema()));
  const int32_t add_op = out.intern_op(tracer::op_info(add.schema()));
  std::vector<ValueId> remap(g.values.size(), -1);
  for (const graph::Input& in : g.inputs) {
    remap[in.value] = out.add_input(g.type(in.value), in.kind, in.name);
  }
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const graph::Node& n = g.nodes[i];
    if (!bias_of[i]) {
      graph::copy_node(g, n, out, remap);
      continue;
    }
    auto operand = [&](const char* name) {
      const graph::Arg* a = sched::node_arg(g, n, name);
      return graph::ValueRef{remap[std::get<graph::ValueRef>(*a).id]};
    };
    const graph::TensorType& type = g.type(n.outputs[0]);
    const int32_t product = out.add_node(mm_op, {operand("mat1"), operand("mat2")}, {type});
    const int32_t sum = out.add_node(add_op,
                                     {graph::ValueRef{out.nodes[product].outputs[0]},
                                      graph::ValueRef{remap[*bias_of[i]]}, int64_t{1}},
                                     {type});
    remap[n.outputs[0]] = out.nodes[sum].outputs[0];
  }
  for (ValueId v : g.outputs) out.outputs.push_back(remap[v]);
  for (const graph::Mutation& mu : g.mutations) {
    out.mutations.push_back({remap[mu.input], remap[mu.value]});
  }
  graph::check_graph(out);
  traced.graph = std::move(out);
  return found;
}

}  // namespace ember::runtime
