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

std::optional<std::pair<int64_t, int64_t>> int_pair_arg(
    const graph::Arg* a, std::optional<std::pair<int64_t, int64_t>> empty) {
  const auto* v = a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
  if (v == nullptr) return std::nullopt;
  if (v->empty()) return empty;
  if (v->size() == 1) return std::pair{(*v)[0], (*v)[0]};
  if (v->size() == 2) return std::pair{(*v)[0], (*v)[1]};
  return std::nullopt;
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
