/// \file
/// Maximum flow and a minimum cut on a small directed graph (Dinic's algorithm), for the
/// min-cut rematerialization partition (partition.h).
#pragma once

#include <cstdint>
#include <vector>

namespace ember::graph {

class FlowNetwork {
 public:
  /// Capacity that no cut pays for: an edge that must not be cut.
  static constexpr int64_t kInfinite = int64_t{1} << 60;

  explicit FlowNetwork(int num_nodes);
  void add_edge(int from, int to, int64_t capacity);
  /// The maximum flow from `source` to `sink` (kInfinite or more when only infinite edges
  /// separate them). Call once.
  int64_t max_flow(int source, int sink);
  /// After max_flow: the nodes reachable from the source in the residual network, the source
  /// side of a minimum cut.
  std::vector<bool> source_side(int source) const;

 private:
  struct Edge {
    int to;
    int64_t capacity;
  };
  bool levels_from(int source, int sink);
  int64_t push(int node, int sink, int64_t limit);

  std::vector<Edge> edges_;            // edge i's reverse is edge i ^ 1
  std::vector<std::vector<int>> out_;  // per node: its edges' indices
  std::vector<int> level_, next_edge_;
};

}  // namespace ember::graph
