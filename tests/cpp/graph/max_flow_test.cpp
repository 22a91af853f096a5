#include "graph/max_flow.h"

#include <gtest/gtest.h>

namespace ember::graph {
namespace {

TEST(FlowNetwork, FindsTheMaximumFlowAndAMinimumCut) {
  // The textbook network (CLRS 26.1): s=0, v1..v4 = 1..4, t=5; maximum flow 23, and the cut
  // {s, v1, v2, v4} | {v3, t} (v1->v3 12, v4->v3 7, v4->t 4).
  FlowNetwork net(6);
  net.add_edge(0, 1, 16);
  net.add_edge(0, 2, 13);
  net.add_edge(2, 1, 4);
  net.add_edge(1, 3, 12);
  net.add_edge(3, 2, 9);
  net.add_edge(2, 4, 14);
  net.add_edge(4, 3, 7);
  net.add_edge(3, 5, 20);
  net.add_edge(4, 5, 4);
  EXPECT_EQ(net.max_flow(0, 5), 23);
  const std::vector<bool> side = net.source_side(0);
  EXPECT_EQ(side, (std::vector<bool>{true, true, true, false, true, false}));
}

TEST(FlowNetwork, InfiniteEdgesAreNeverCut) {
  // s -inf-> a -5-> b -inf-> t, and s -3-> b: the cut is a->b and s->b (8), never an infinite
  // edge.
  FlowNetwork net(4);
  net.add_edge(0, 1, FlowNetwork::kInfinite);
  net.add_edge(1, 2, 5);
  net.add_edge(2, 3, FlowNetwork::kInfinite);
  net.add_edge(0, 2, 3);
  EXPECT_EQ(net.max_flow(0, 3), 8);
  EXPECT_EQ(net.source_side(0), (std::vector<bool>{true, true, false, false}));
}

TEST(FlowNetwork, UnboundedWhenOnlyInfiniteEdgesSeparate) {
  FlowNetwork net(3);
  net.add_edge(0, 1, FlowNetwork::kInfinite);
  net.add_edge(1, 2, FlowNetwork::kInfinite);
  EXPECT_GE(net.max_flow(0, 2), FlowNetwork::kInfinite);
}

}  // namespace
}  // namespace ember::graph
