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

namespace {

// Puts the nodes of `g` in the order of their keys (ties keep node order) and renumbers the values'
// producers.
void reorder(graph::Graph& g, std::vector<std::pair<int64_t, int32_t>> order) {
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<graph::Node> nodes;
  nodes.reserve(g.nodes.size());
  for (const auto& [at, i] : order) {
    for (graph::ValueId v : g.nodes[i].outputs)
      g.values[v].node = static_cast<int32_t>(nodes.size());
    nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
}

// The first node that reads each value (g.nodes.size(): none).
std::vector<int64_t> first_readers(const graph::Graph& g) {
  const int64_t n = static_cast<int64_t>(g.nodes.size());
  std::vector<int64_t> first(g.values.size(), n);
  for (int64_t i = n - 1; i >= 0; --i) {
    for (graph::ValueId v : graph::tensor_reads(g.nodes[i])) first[v] = i;
  }
  return first;
}

}  // namespace

int hoist_collectives(tracer::TracedGraph& traced) {
  graph::Graph& g = traced.graph;
  const int64_t n = static_cast<int64_t>(g.nodes.size());
  const std::vector<int64_t> first_reader = first_readers(g);
  // The first node that uses a collective's result: the first reader of its wait's output.
  auto consumer = [&](const graph::Node& c) {
    int64_t first = n;
    for (graph::ValueId v : c.outputs) {
      int64_t r = first_reader[v];
      if (r < n && is_collective_wait(g.op_of(g.nodes[r])) && g.nodes[r].outputs.size() == 1) {
        r = first_reader[g.nodes[r].outputs[0]];
      }
      first = std::min(first, r);
    }
    return first;
  };
  // Node i keeps the key (i + 1) * (n + 1); a collective takes its latest dependency's key plus
  // one more than the collectives already placed right after that dependency (at most n of
  // them, so it stays before the dependency's next node).
  std::vector<int64_t> key(static_cast<size_t>(n));
  std::vector<int64_t> placed_after(static_cast<size_t>(n) + 1, 0);  // by dependency + 1
  std::vector<std::pair<int64_t, int32_t>> order;
  order.reserve(static_cast<size_t>(n));
  // The previous collective, and the node just before the first use of its result: a
  // collective is not issued before that, so one collective's result at most is in flight ahead
  // of the work that uses it (the next layer's all-gather issued as this layer's starts, not
  // every layer's at the top of the graph, holding every gathered weight at once).
  int64_t last_collective = -1, last_used = -1;
  for (int64_t i = 0; i < n; ++i) {
    const graph::Node& node = g.nodes[i];
    key[i] = (i + 1) * (n + 1);
    if (is_collective(g.op_of(node))) {
      int64_t dep = std::max(last_collective, last_used - 1);
      for (graph::ValueId v : graph::tensor_reads(node)) {
        dep = std::max<int64_t>(dep, g.values[v].node);  // -1: a graph input
      }
      if (dep < i - 1) {
        // Where the dependency is another collective hoisted there, it counts by its own key.
        const int64_t base = dep < 0 ? 0 : key[dep];
        int64_t& after = placed_after[static_cast<size_t>(dep + 1)];
        if (base + after + 1 < key[i]) key[i] = base + ++after;
      }
      last_collective = i;
      last_used = consumer(node);
    }
    order.emplace_back(key[i], static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  int moved = 0;  // collectives at another index than before
  for (size_t at = 0; at < order.size(); ++at) {
    const int32_t i = order[at].second;
    moved += is_collective(g.op_of(g.nodes[i])) && static_cast<size_t>(i) != at ? 1 : 0;
  }
  if (moved == 0) return 0;
  reorder(g, std::move(order));
  return moved;
}

int sink_collective_waits(tracer::TracedGraph& traced) {
  graph::Graph& g = traced.graph;
  const int32_t n = static_cast<int32_t>(g.nodes.size());
  const std::vector<int64_t> first_reader = first_readers(g);
  // Each node's place in the new order: a wait takes its first reader's place, just before it
  // (ties keep node order, so a wait stays after its collective and before that reader).
  std::vector<std::pair<int64_t, int32_t>> order;
  order.reserve(n);
  int moved = 0;
  for (int32_t i = 0; i < n; ++i) {
    const graph::Node& node = g.nodes[i];
    int64_t at = 2 * static_cast<int64_t>(i) + 1;
    if (is_collective_wait(g.op_of(node)) && node.outputs.size() == 1) {
      const int64_t reader = first_reader[node.outputs[0]];
      if (reader > i + 1) {
        at = 2 * reader;  // before the reader's 2 * reader + 1
        ++moved;
      }
    }
    order.emplace_back(at, i);
  }
  if (moved == 0) return 0;
  reorder(g, std::move(order));
  return moved;
}

}  // namespace ember::runtime
