#include "graph/ops.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "graph/graph.h"
#include "graph_builders.h"

namespace ember::graph {
namespace {

TEST(OpTable, NameAndKindRoundTrip) {
  std::set<std::string_view> names;
  for (int i = 1; i <= num_op_kinds(); ++i) {
    const auto kind = static_cast<OpKind>(i);
    const std::string_view name = op_name(kind);
    EXPECT_TRUE(name.starts_with("aten::") || name.starts_with("ember::")) << name;
    EXPECT_TRUE(names.insert(name).second) << "two rows name " << name;
    EXPECT_EQ(op_kind(name), kind) << name;
    EXPECT_NE(op_category(kind), OpCategory::Other) << name;
  }
}

TEST(OpTable, UnlistedNamesAreUnknown) {
  EXPECT_EQ(op_kind("aten::not_an_op"), OpKind::Unknown);
  EXPECT_EQ(op_kind("aten::add.Tensor"), OpKind::Unknown);  // rows are names, not overloads
  EXPECT_EQ(op_kind("add"), OpKind::Unknown);
  EXPECT_EQ(op_kind(""), OpKind::Unknown);
  EXPECT_EQ(op_name(OpKind::Unknown), "");
  EXPECT_EQ(op_category(OpKind::Unknown), OpCategory::Other);
}

TEST(OpTable, Properties) {
  EXPECT_EQ(op_kind("aten::add"), OpKind::add);
  EXPECT_EQ(op_name(OpKind::_softmax), "aten::_softmax");
  EXPECT_EQ(op_category(OpKind::add), OpCategory::Pointwise);
  EXPECT_EQ(op_category(OpKind::sum), OpCategory::Reduction);
  EXPECT_TRUE(is_view_op(OpKind::transpose));
  EXPECT_FALSE(is_view_op(OpKind::clone));
  EXPECT_FALSE(is_view_op(OpKind::Unknown));
}

TEST(OpTable, InternSetsTheKind) {
  Graph g;
  const int32_t add = g.intern_op(test::make_op("aten::add", "Tensor", {"self"}, {false}));
  const int32_t custom = g.intern_op(test::make_op("my::op", "", {"self"}, {false}));
  EXPECT_EQ(g.ops[add].kind, OpKind::add);
  EXPECT_EQ(g.ops[custom].kind, OpKind::Unknown);
  // The kind is derived: an OpInfo without it still finds its interned copy.
  EXPECT_EQ(g.intern_op(test::make_op("aten::add", "Tensor", {"self"}, {false})), add);
  EXPECT_EQ(g.ops.size(), 2u);
}

}  // namespace
}  // namespace ember::graph
