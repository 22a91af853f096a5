#include "graph/max_flow.h"

#include <algorithm>
#include <deque>

#include "support/error.h"

namespace ember::graph {

FlowNetwork::FlowNetwork(int num_nodes) : out_(num_nodes) {}

void FlowNetwork::add_edge(int from, int to, int64_t capacity) {
  EMBER_INTERNAL_ASSERT(from >= 0 && to >= 0 && from < static_cast<int>(out_.size()) &&
                        to < static_cast<int>(out_.size()) && capacity >= 0)
      << "FlowNetwork: bad edge " << from << " -> " << to;
  out_[from].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({to, std::min(capacity, kInfinite)});
  out_[to].push_back(static_cast<int>(edges_.size()));
  edges_.push_back({from, 0});
}

bool FlowNetwork::levels_from(int source, int sink) {
  level_.assign(out_.size(), -1);
  level_[source] = 0;
  std::deque<int> queue = {source};
  while (!queue.empty()) {
    const int n = queue.front();
    queue.pop_front();
    for (int e : out_[n]) {
      if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
        level_[edges_[e].to] = level_[n] + 1;
        queue.push_back(edges_[e].to);
      }
    }
  }
  return level_[sink] >= 0;
}

int64_t FlowNetwork::push(int node, int sink, int64_t limit) {
  if (node == sink) return limit;
  for (int& i = next_edge_[node]; i < static_cast<int>(out_[node].size()); ++i) {
    const int e = out_[node][i];
    const int to = edges_[e].to;
    if (edges_[e].capacity <= 0 || level_[to] != level_[node] + 1) continue;
    const int64_t pushed = push(to, sink, std::min(limit, edges_[e].capacity));
    if (pushed > 0) {
      edges_[e].capacity -= pushed;
      edges_[e ^ 1].capacity += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t FlowNetwork::max_flow(int source, int sink) {
  int64_t flow = 0;
  while (flow < kInfinite && levels_from(source, sink)) {
    next_edge_.assign(out_.size(), 0);
    while (int64_t pushed = push(source, sink, kInfinite)) {
      flow += pushed;
      if (flow >= kInfinite) break;
    }
  }
  return flow;
}

std::vector<bool> FlowNetwork::source_side(int source) const {
  std::vector<bool> seen(out_.size(), false);
  std::vector<int> todo = {source};
  seen[source] = true;
  while (!todo.empty()) {
    const int n = todo.back();
    todo.pop_back();
    for (int e : out_[n]) {
      if (edges_[e].capacity > 0 && !seen[edges_[e].to]) {
        seen[edges_[e].to] = true;
        todo.push_back(edges_[e].to);
      }
    }
  }
  return seen;
}

}  // namespace ember::graph
