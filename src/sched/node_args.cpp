#include "sched/node_args.h"

#include <variant>

namespace ember::sched {

const graph::Arg* node_arg(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  const graph::OpInfo& op = g.op_of(n);
  for (size_t i = 0; i < op.arg_names.size() && i < n.args.size(); ++i) {
    if (op.arg_names[i] == name) return &n.args[i];
  }
  return nullptr;
}

bool value_unread(const graph::Graph& g, graph::ValueId v) {
  for (graph::ValueId o : g.outputs) {
    if (o == v) return false;
  }
  for (const graph::Mutation& m : g.mutations) {
    if (m.value == v || m.input == v) return false;
  }
  for (const graph::Node& n : g.nodes) {
    for (const graph::Arg& a : n.args) {
      if (const auto* r = std::get_if<graph::ValueRef>(&a); r && r->id == v) return false;
      if (const auto* l = std::get_if<graph::ValueList>(&a)) {
        for (const auto& item : l->items) {
          if (item == v) return false;
        }
      }
    }
  }
  return true;
}

}  // namespace ember::sched
