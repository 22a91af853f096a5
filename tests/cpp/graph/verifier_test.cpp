#include "graph/verifier.h"

#include <gtest/gtest.h>

#include "graph_builders.h"
#include "support/error.h"

namespace ember::graph {
namespace {

using Messages = std::vector<std::string>;

using test::make_type;

/// %0 user, %1 param, %2 buffer, %3 const; %4 = add(%0, %1), %5 = mul(%4, %3),
/// %6 = sum(%5, [0]); %2 <- %6; return (%5).
Graph build_valid() {
  Graph g;
  ValueId x = g.add_input(make_type({2, 3}), InputKind::User, "x");
  ValueId w = g.add_input(make_type({3}), InputKind::Parameter, "w");
  ValueId b = g.add_input(make_type({3}), InputKind::Buffer, "b");
  ValueId c = g.add_input(make_type({3}), InputKind::Constant);
  int32_t add =
      g.intern_op({"aten::add", "Tensor", {"self", "other", "alpha"}, {false, false, true}});
  int32_t mul = g.intern_op({"aten::mul", "Tensor", {"self", "other"}, {false, false}});
  int32_t sum = g.intern_op({"aten::sum",
                             "dim_IntList",
                             {"self", "dim", "keepdim", "dtype"},
                             {false, false, false, true}});
  g.add_node(add, {ValueRef{x}, ValueRef{w}, int64_t{1}}, {make_type({2, 3})});
  g.add_node(mul, {ValueRef{4}, ValueRef{c}}, {make_type({2, 3})});
  g.add_node(sum, {ValueRef{5}, std::vector<int64_t>{0}, false, NoneArg{}}, {make_type({3})});
  g.mutations.push_back(Mutation{b, 6});
  g.outputs = {5};
  return g;
}

TEST(VerifyGraph, AcceptsAValidGraph) {
  EXPECT_EQ(verify_graph(build_valid()), Messages{});
  EXPECT_EQ(verify_graph(Graph{}), Messages{});
  EXPECT_NO_THROW(check_graph(build_valid()));
}

TEST(VerifyGraph, ReportsUseBeforeDefinition) {
  Graph g = build_valid();
  g.nodes[0].args[1] = ValueRef{5};
  EXPECT_EQ(verify_graph(g),
            Messages{"node 0 (aten::add.Tensor) argument 1 uses %5 before it is defined"});
}

TEST(VerifyGraph, ReportsANodeUsingItsOwnOutput) {
  Graph g = build_valid();
  g.nodes[1].args[0] = ValueRef{5};
  EXPECT_EQ(verify_graph(g),
            Messages{"node 1 (aten::mul.Tensor) argument 0 uses %5 before it is defined"});
}

TEST(VerifyGraph, ReportsDanglingIds) {
  Graph g = build_valid();
  g.nodes[1].args[1] = ValueRef{42};
  g.nodes[2].args[0] = ValueRef{-1};
  EXPECT_EQ(verify_graph(g),
            (Messages{
                "node 1 (aten::mul.Tensor) argument 1 names %42, which does not exist (the graph "
                "has 7 values)",
                "node 2 (aten::sum.dim_IntList) argument 0 names %-1, which does not exist (the "
                "graph has 7 values)",
            }));
}

TEST(VerifyGraph, ReportsAnOpKindNotItsName) {
  Graph g = build_valid();
  g.ops[1].kind = OpKind::add;  // aten::mul
  EXPECT_EQ(verify_graph(g), Messages{"op 1 (aten::mul) has kind 'aten::add', not its name's"});
}

TEST(VerifyGraph, ChecksValueListItems) {
  Graph g = build_valid();
  g.nodes[1].args[1] = ValueList{{3, 9, std::nullopt}, /*optional_items=*/false};
  EXPECT_EQ(verify_graph(g), (Messages{
                                 "node 1 (aten::mul.Tensor) argument 1 item 1 names %9, which "
                                 "does not exist (the graph has 7 values)",
                                 "node 1 (aten::mul.Tensor) argument 1 item 2 is None but the "
                                 "list is not Tensor?[]",
                             }));
}

TEST(VerifyGraph, ReportsWrongArgumentCount) {
  Graph g = build_valid();
  g.nodes[0].args.pop_back();
  EXPECT_EQ(verify_graph(g),
            Messages{"node 0 (aten::add.Tensor) has 2 arguments but the op takes 3"});
}

TEST(VerifyGraph, ReportsBadOpIndexAndStillChecksArguments) {
  Graph g = build_valid();
  g.nodes[1].op = 3;
  g.nodes[1].args[0] = ValueRef{6};
  EXPECT_EQ(verify_graph(g), (Messages{
                                 "node 1 has op index 3 but the graph has 3 ops",
                                 "node 1 argument 0 uses %6 before it is defined",
                             }));
}

TEST(VerifyGraph, ReportsMalformedTypes) {
  Graph g = build_valid();
  g.values[0].type.strides.pop_back();
  g.values[5].type.sizes[1] = -1;
  EXPECT_EQ(verify_graph(g), (Messages{
                                 "input 0 (%0) has 2 sizes but 1 strides",
                                 "node 1 (aten::mul.Tensor) output 0 (%5) has negative size -1 "
                                 "in dim 1",
                             }));
}

TEST(VerifyGraph, ReportsOutputsNamingUndefinedValues) {
  Graph g = build_valid();
  g.values.push_back(Value{make_type({1}), -1, 0});
  g.outputs = {7, 8};
  EXPECT_EQ(verify_graph(g), (Messages{
                                 "output 0 names %7, which is never defined",
                                 "output 1 names %8, which does not exist (the graph has 8 "
                                 "values)",
                                 "value %7 is never defined",
                             }));
}

TEST(VerifyGraph, ReportsValuesDefinedTwiceOrRecordedWrongly) {
  Graph g = build_valid();
  g.nodes[2].outputs = {4};
  g.values[1].index = 3;
  EXPECT_EQ(verify_graph(g),
            (Messages{
                "value %1 is defined by input 1 but records input 3",
                "value %4 is defined again by node 2 (aten::sum.dim_IntList) output 0 (first by "
                "node 0 (aten::add.Tensor) output 0)",
                "mutation 0 value names %6, which is never defined",
                "value %6 is never defined",
            }));
}

TEST(VerifyGraph, ReportsMutationIntoAConstant) {
  Graph g = build_valid();
  g.mutations[0].input = 3;
  EXPECT_EQ(verify_graph(g), Messages{"mutation 0 targets %3, which is a constant"});
}

TEST(VerifyGraph, ReportsMutationIntoANonInput) {
  Graph g = build_valid();
  g.mutations[0].input = 4;
  EXPECT_EQ(verify_graph(g), Messages{"mutation 0 targets %4, which is not a graph input"});
}

TEST(VerifyGraph, ReportsMutationWithADifferentShapeOrDType) {
  Graph g = build_valid();
  g.mutations[0].value = 5;
  g.values[5].type.dtype = DType::Float16;
  EXPECT_EQ(verify_graph(g), (Messages{
                                 "mutation 0 writes f16 %5 into f32 %2",
                                 "mutation 0 writes %5 of sizes [2, 3] into %2 of sizes [3]",
                             }));
}

TEST(VerifyGraph, ReportsMutationOfUndefinedValues) {
  Graph g = build_valid();
  g.mutations[0] = Mutation{11, 12};
  EXPECT_EQ(verify_graph(g), (Messages{
                                 "mutation 0 target names %11, which does not exist (the graph "
                                 "has 7 values)",
                                 "mutation 0 value names %12, which does not exist (the graph "
                                 "has 7 values)",
                             }));
}

TEST(CheckGraph, ThrowsInternalErrorWithMessagesAndThePrintedGraph) {
  Graph g = build_valid();
  g.nodes[0].args.pop_back();
  g.outputs.push_back(40);
  try {
    check_graph(g);
    FAIL() << "check_graph accepted a broken graph";
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("graph verification failed with 2 problem(s):\n"
                        "  - node 0 (aten::add.Tensor) has 2 arguments but the op takes 3\n"
                        "  - output 1 names %40, which does not exist (the graph has 7 values)\n"
                        "graph {\n"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("  return (%5, %40)\n}"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace ember::graph
