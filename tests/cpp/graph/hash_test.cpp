#include "graph/graph_hash.h"
#include "graph_builders.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

namespace ember::graph {
namespace {

using test::make_type;

/// %0 user x, %1 buffer b; %2 = add(%0, %1, alpha=1); %3 = mul(%2, 0.5); %1 <- %3;
/// return (%2, %3).
Graph build(const std::string& input_name = "x") {
  Graph g;
  ValueId x = g.add_input(make_type({3}), InputKind::User, input_name);
  ValueId b = g.add_input(make_type({3}), InputKind::Buffer, "b");
  int32_t add =
      g.intern_op({"aten::add", "Tensor", {"self", "other", "alpha"}, {false, false, true}});
  int32_t mul = g.intern_op({"aten::mul", "Scalar", {"self", "other"}, {false, false}});
  g.add_node(add, {ValueRef{x}, ValueRef{b}, int64_t{1}}, {make_type({3})});
  g.add_node(mul, {ValueRef{2}, 0.5}, {make_type({3})});
  g.mutations.push_back(Mutation{b, 3});
  g.outputs = {2, 3};
  return g;
}

TEST(HashGraph, IsDeterministic) {
  Graph g = build();
  EXPECT_EQ(hash_graph(g), hash_graph(g));
}

TEST(HashGraph, IsEqualForIdenticallyBuiltGraphs) {
  EXPECT_EQ(hash_graph(build()), hash_graph(build()));
}

TEST(HashGraph, IgnoresInputNames) {
  EXPECT_EQ(hash_graph(build("x")), hash_graph(build("renamed")));
}

TEST(HashGraph, TreatsAllNaNsAlike) {
  Graph a = build();
  Graph b = build();
  a.nodes[1].args[1] = std::numeric_limits<double>::quiet_NaN();
  b.nodes[1].args[1] = -std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(hash_graph(a), hash_graph(b));
}

TEST(HashGraph, ChangesWithEveryStructuralEdit) {
  const std::pair<const char*, std::function<void(Graph&)>> edits[] = {
      {"int arg value", [](Graph& g) { g.nodes[0].args[2] = int64_t{2}; }},
      {"double arg value", [](Graph& g) { g.nodes[1].args[1] = 0.25; }},
      {"arg kind, same number", [](Graph& g) { g.nodes[1].args[1] = int64_t{0}; }},
      {"negative zero", [](Graph& g) { g.nodes[1].args[1] = -0.0; }},
      {"arg value ref", [](Graph& g) { g.nodes[1].args[0] = ValueRef{0}; }},
      {"op overload", [](Graph& g) { g.ops[1].overload = "Tensor"; }},
      {"op kwarg flag", [](Graph& g) { g.ops[0].kwarg_only[2] = false; }},
      {"op arg name", [](Graph& g) { g.ops[0].arg_names[2] = "beta"; }},
      {"op returns_list", [](Graph& g) { g.ops[0].returns_list = true; }},
      {"node op index", [](Graph& g) { g.nodes[1].op = 0; }},
      {"input dtype", [](Graph& g) { g.values[0].type.dtype = DType::Float16; }},
      {"input kind", [](Graph& g) { g.inputs[0].kind = InputKind::Parameter; }},
      {"input size", [](Graph& g) { g.values[0].type.sizes[0] = 4; }},
      {"input stride", [](Graph& g) { g.values[0].type.strides[0] = 2; }},
      {"input offset", [](Graph& g) { g.values[0].type.storage_offset = 1; }},
      {"input device",
       [](Graph& g) {
         g.values[0].type.device = Device{DeviceKind::CUDA, 0};
       }},
      {"requires_grad", [](Graph& g) { g.values[1].type.requires_grad = true; }},
      {"output type", [](Graph& g) { g.values[3].type.dtype = DType::BFloat16; }},
      {"output order",
       [](Graph& g) {
         g.outputs = {3, 2};
       }},
      {"fewer outputs", [](Graph& g) { g.outputs = {2}; }},
      {"mutation value", [](Graph& g) { g.mutations[0].value = 2; }},
      {"no mutation", [](Graph& g) { g.mutations.clear(); }},
  };
  const uint64_t base = hash_graph(build());
  for (const auto& [what, edit] : edits) {
    Graph g = build();
    edit(g);
    EXPECT_NE(hash_graph(g), base) << what;
  }
}

TEST(HashGraph, SeparatesAdjacentLists) {
  Graph a = build();
  Graph b = build();
  a.nodes[0].args[2] = std::vector<int64_t>{1, 2};
  b.nodes[0].args[2] = std::vector<int64_t>{1};
  EXPECT_NE(hash_graph(a), hash_graph(b));
  a.nodes[0].args[2] = ValueList{{0, std::nullopt}, true};
  b.nodes[0].args[2] = ValueList{{0, std::nullopt}, false};
  EXPECT_NE(hash_graph(a), hash_graph(b));
}

TEST(HashGraph, DoesNotCrashOnDanglingIds) {
  Graph g = build();
  g.nodes[1].outputs.push_back(99);
  g.inputs[0].value = -5;
  EXPECT_NE(hash_graph(g), hash_graph(build()));
}

}  // namespace
}  // namespace ember::graph
