#include "runtime/collectives.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace ember::runtime {

namespace {
constexpr std::string_view kFunctional = "_c10d_functional::";
}  // namespace

bool is_collective(const graph::OpInfo& op) {
  return std::string_view(op.name).starts_with(kFunctional) && !is_collective_wait(op);
}

bool is_collective_wait(const graph::OpInfo& op) {
  return op.name == "_c10d_functional::wait_tensor";
}

int sink_collective_waits(tracer::TracedGraph& traced) {
  graph::Graph& g = traced.graph;
  const int32_t n = static_cast<int32_t>(g.nodes.size());
  // First reader of each value, in node order.
  std::vector<int32_t> first_reader(g.values.size(), n);
  for (int32_t i = n - 1; i >= 0; --i) {
    for (graph::ValueId v : graph::tensor_reads(g.nodes[i])) first_reader[v] = i;
  }
  // Each node's place in the new order: a wait takes its first reader's place, just before it
  // (ties keep node order, so a wait stays after its collective and before that reader).
  std::vector<std::pair<int64_t, int32_t>> order;
  order.reserve(n);
  int moved = 0;
  for (int32_t i = 0; i < n; ++i) {
    const graph::Node& node = g.nodes[i];
    int64_t at = 2 * static_cast<int64_t>(i) + 1;
    if (is_collective_wait(g.op_of(node)) && node.outputs.size() == 1) {
      const int32_t reader = first_reader[node.outputs[0]];
      if (reader > i + 1) {
        at = 2 * static_cast<int64_t>(reader);  // before the reader's 2 * reader + 1
        ++moved;
      }
    }
    order.emplace_back(at, i);
  }
  if (moved == 0) return 0;
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<graph::Node> nodes;
  nodes.reserve(n);
  for (const auto& [at, i] : order) {
    for (graph::ValueId v : g.nodes[i].outputs)
      g.values[v].node = static_cast<int32_t>(nodes.size());
    nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  return moved;
}

}  // namespace ember::runtime
