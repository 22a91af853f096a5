#include "graph/graph.h"

#include "support/error.h"

namespace ember::graph {

Arg int_arg(const DimExpr& d) {
  if (d.is_constant()) return Arg{d.constant()};
  return Arg{d};
}

Arg int_list_arg(const Dims& dims) {
  if (all_constant(dims)) return Arg{constant_values(dims)};
  return Arg{dims};
}

std::optional<DimExpr> dim_arg(const Arg& a) {
  if (const auto* i = std::get_if<int64_t>(&a)) return DimExpr(*i);
  if (const auto* d = std::get_if<DimExpr>(&a)) return *d;
  return std::nullopt;
}

std::optional<Dims> dims_arg(const Arg& a) {
  if (const auto* v = std::get_if<std::vector<int64_t>>(&a)) return Dims(v->begin(), v->end());
  if (const auto* d = std::get_if<Dims>(&a)) return *d;
  return std::nullopt;
}

std::string OpInfo::qualified_name() const {
  return overload.empty() ? name : name + "." + overload;
}

std::string input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::User:
      return "user";
    case InputKind::Parameter:
      return "param";
    case InputKind::Buffer:
      return "buffer";
    case InputKind::Constant:
      return "const";
  }
  return "?";
}

ValueId Graph::add_input(TensorType type, InputKind kind, std::string name) {
  ValueId id = static_cast<ValueId>(values.size());
  values.push_back(Value{std::move(type), -1, static_cast<int32_t>(inputs.size())});
  inputs.push_back(Input{id, kind, std::move(name)});
  return id;
}

int32_t Graph::intern_op(const OpInfo& op) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] == op) return static_cast<int32_t>(i);
  }
  ops.push_back(op);
  ops.back().kind = op_kind(op.name);
  return static_cast<int32_t>(ops.size() - 1);
}

int32_t Graph::add_node(int32_t op, std::vector<Arg> args, std::vector<TensorType> output_types) {
  EMBER_INTERNAL_ASSERT(op >= 0 && op < static_cast<int32_t>(ops.size())) << "op index " << op;
  int32_t node_index = static_cast<int32_t>(nodes.size());
  Node n;
  n.op = op;
  n.args = std::move(args);
  for (size_t i = 0; i < output_types.size(); ++i) {
    n.outputs.push_back(static_cast<ValueId>(values.size()));
    values.push_back(Value{std::move(output_types[i]), node_index, static_cast<int32_t>(i)});
  }
  nodes.push_back(std::move(n));
  return node_index;
}

int Graph::num_constants() const {
  int n = 0;
  for (const Input& in : inputs) n += in.kind == InputKind::Constant;
  return n;
}

std::vector<ValueId> tensor_reads(const Node& n) {
  std::vector<ValueId> out;
  for (const Arg& a : n.args) {
    if (const auto* r = std::get_if<ValueRef>(&a)) out.push_back(r->id);
    if (const auto* l = std::get_if<ValueList>(&a)) {
      for (const auto& item : l->items) {
        if (item) out.push_back(*item);
      }
    }
  }
  return out;
}

std::vector<bool> nodes_needed_by(const Graph& g, const std::vector<ValueId>& roots) {
  std::vector<bool> need(g.nodes.size(), false);
  std::vector<ValueId> todo = roots;
  while (!todo.empty()) {
    const ValueId v = todo.back();
    todo.pop_back();
    const int32_t p = g.values[v].node;
    if (p < 0 || need[p]) continue;
    need[p] = true;
    for (ValueId r : tensor_reads(g.nodes[p])) todo.push_back(r);
  }
  return need;
}

void copy_node(const Graph& from, const Node& n, Graph& to, std::vector<ValueId>& remap) {
  auto map = [&](ValueId v) {
    EMBER_INTERNAL_ASSERT(remap[v] >= 0) << "copy_node: value %" << v << " has no definition";
    return remap[v];
  };
  std::vector<Arg> args = n.args;
  for (Arg& a : args) {
    if (auto* r = std::get_if<ValueRef>(&a)) r->id = map(r->id);
    if (auto* l = std::get_if<ValueList>(&a)) {
      for (auto& item : l->items) {
        if (item) item = map(*item);
      }
    }
  }
  std::vector<TensorType> types;
  for (ValueId o : n.outputs) types.push_back(from.type(o));
  const int32_t m = to.add_node(n.op, std::move(args), std::move(types));
  to.nodes[m].result_slots = n.result_slots;
  for (size_t i = 0; i < n.outputs.size(); ++i) remap[n.outputs[i]] = to.nodes[m].outputs[i];
}

}  // namespace ember::graph
