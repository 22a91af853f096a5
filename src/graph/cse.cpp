#include "graph/cse.h"

#include <map>
#include <string>
#include <vector>

#include "graph/printer.h"
#include "support/error.h"

namespace ember::graph {

namespace {

bool same_layout(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.device == b.device && a.sizes == b.sizes &&
         a.strides == b.strides && a.storage_offset == b.storage_offset;
}

bool is_transpose(const Graph& g, const Node& n) {
  const OpInfo& op = g.op_of(n);
  return op.kind == OpKind::t || (op.kind == OpKind::transpose && op.overload == "int");
}

}  // namespace

Graph merge_common_subexpressions(const Graph& g,
                                  const std::function<bool(const Graph&, const Node&)>& may_merge) {
  Graph out;
  out.ops = g.ops;
  out.symbols = g.symbols;
  std::vector<ValueId> remap(g.values.size(), -1);
  for (const Input& in : g.inputs)
    remap[in.value] = out.add_input(g.type(in.value), in.kind, in.name);
  std::map<std::string, int32_t> first;  // key -> node of out
  // A graph output keeps its own node: two outputs (two parameters' gradients) must not become
  // one tensor, which an in-place update of either would change for both.
  std::vector<bool> is_output(g.values.size(), false);
  for (ValueId o : g.outputs) is_output[o] = true;
  auto any_output = [&](const Node& n) {
    for (ValueId o : n.outputs) {
      if (is_output[o]) return true;
    }
    return false;
  };
  for (const Node& n : g.nodes) {
    if (any_output(n)) {
      copy_node(g, n, out, remap);
      continue;
    }
    // transpose(transpose(x)) with x's own layout is x.
    if (is_transpose(g, n) && n.outputs.size() == 1 && !n.args.empty()) {
      if (const auto* in = std::get_if<ValueRef>(&n.args[0])) {
        const Value& v = g.values.at(in->id);
        if (v.node >= 0 && is_transpose(g, g.nodes.at(v.node))) {
          const Node& inner = g.nodes.at(v.node);
          if (const auto* x = std::get_if<ValueRef>(&inner.args[0]);
              x != nullptr && same_layout(g.type(x->id), g.type(n.outputs[0])) &&
              remap[x->id] >= 0) {
            remap[n.outputs[0]] = remap[x->id];
            continue;
          }
        }
      }
    }
    if (!n.outputs.empty() && may_merge(g, n)) {
      std::string key = std::to_string(n.op);
      for (const Arg& a : n.args) {
        Arg mapped = a;
        if (auto* ref = std::get_if<ValueRef>(&mapped)) ref->id = remap.at(ref->id);
        if (auto* list = std::get_if<ValueList>(&mapped)) {
          for (auto& item : list->items) {
            if (item) item = remap.at(*item);
          }
        }
        key += '|' + print_arg(mapped);
      }
      for (ValueId o : n.outputs) key += '|' + type_str(g.type(o));
      auto [it, fresh] = first.emplace(key, -1);
      if (!fresh) {
        const Node& kept = out.nodes.at(it->second);
        for (size_t i = 0; i < n.outputs.size(); ++i) remap[n.outputs[i]] = kept.outputs[i];
        continue;
      }
      copy_node(g, n, out, remap);
      it->second = static_cast<int32_t>(out.nodes.size()) - 1;
      continue;
    }
    copy_node(g, n, out, remap);
  }
  for (ValueId o : g.outputs) out.outputs.push_back(remap.at(o));
  for (const Mutation& m : g.mutations)
    out.mutations.push_back({remap.at(m.input), remap.at(m.value)});
  return out;
}

}  // namespace ember::graph
