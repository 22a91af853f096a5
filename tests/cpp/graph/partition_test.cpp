#include "graph/partition.h"

#include <gtest/gtest.h>

#include <string>

#include "graph/printer.h"
#include "support/error.h"

namespace ember::graph {
namespace {

TensorType make_type(Dims sizes) {
  TensorType t;
  t.dtype = DType::Float32;
  t.strides = contiguous_strides(sizes);
  t.sizes = std::move(sizes);
  return t;
}

int32_t op(Graph& g, const std::string& name, std::vector<std::string> args) {
  std::vector<bool> kw(args.size(), false);
  return g.intern_op({name, "", std::move(args), kw});
}

/// y = sum(relu(x @ t(w)) * c) with a constant c, then its backward for w:
///   %0 x, %1 w (primals), %2 c (constant), %3 dy (tangent)
///   %4 = t(%1); %5 = mm(%0, %4); %6 = relu(%5); %7 = mul(%6, %2); %8 = sum(%7)
///   %9 = expand(%3); %10 = mul(%9, %2); %11 = threshold_backward(%10, %6); %12 = t(%11);
///   %13 = mm(%12, %0)
///   return (%8, %13)
Graph joint() {
  Graph g;
  const ValueId x = g.add_input(make_type({4, 8}), InputKind::User, "x");
  const ValueId w = g.add_input(make_type({16, 8}), InputKind::Parameter, "w");
  const ValueId c = g.add_input(make_type({16}), InputKind::Constant);
  const ValueId dy = g.add_input(make_type({}), InputKind::User, "dy");
  const int32_t t = op(g, "aten::t", {"self"}), mm = op(g, "aten::mm", {"self", "mat2"});
  const int32_t relu = op(g, "aten::relu", {"self"});
  const int32_t mul = op(g, "aten::mul", {"self", "other"}), sum = op(g, "aten::sum", {"self"});
  const int32_t expand = op(g, "aten::expand", {"self", "size"});
  const int32_t thb = op(g, "aten::threshold_backward", {"grad_output", "self", "threshold"});
  auto node = [&](int32_t o, std::vector<Arg> args, Dims sizes) {
    return g.nodes[g.add_node(o, std::move(args), {make_type(std::move(sizes))})].outputs[0];
  };
  const ValueId wt = node(t, {ValueRef{w}}, {8, 16});
  const ValueId h = node(mm, {ValueRef{x}, ValueRef{wt}}, {4, 16});
  const ValueId r = node(relu, {ValueRef{h}}, {4, 16});
  const ValueId m = node(mul, {ValueRef{r}, ValueRef{c}}, {4, 16});
  const ValueId y = node(sum, {ValueRef{m}}, {});
  const ValueId e = node(expand, {ValueRef{dy}, std::vector<int64_t>{4, 16}}, {4, 16});
  const ValueId dm = node(mul, {ValueRef{e}, ValueRef{c}}, {4, 16});
  const ValueId dh = node(thb, {ValueRef{dm}, ValueRef{r}, 0.0}, {4, 16});
  const ValueId dht = node(t, {ValueRef{dh}}, {16, 4});
  const ValueId dw = node(mm, {ValueRef{dht}, ValueRef{x}}, {16, 8});
  g.outputs = {y, dw};
  return g;
}

TEST(SplitJoint, SavesWhatTheBackwardReadsOfTheForward) {
  const JointSplit s = split_joint(joint(), {false, false, false, true}, 1);
  EXPECT_EQ(print_graph(s.forward),
            "graph {\n"
            "  input %0 : f32[4, 8] cpu  # user x\n"
            "  input %1 : f32[16, 8] cpu  # param w\n"
            "  const %2 : f32[16] cpu\n"
            "  %3 : f32[8, 16] cpu = aten::t(%1)\n"
            "  %4 : f32[4, 16] cpu = aten::mm(%0, %3)\n"
            "  %5 : f32[4, 16] cpu = aten::relu(%4)\n"
            "  %6 : f32[4, 16] cpu = aten::mul(%5, %2)\n"
            "  %7 : f32[] cpu = aten::sum(%6)\n"
            "  return (%7, %5)\n"
            "}\n");
  // relu's result (a forward output) and x (the caller's) are saved; the constant is the
  // backward's own input.
  EXPECT_EQ(s.saved_inputs, (std::vector<int>{-1, 0}));
  EXPECT_EQ(s.forward_constants, (std::vector<int>{0}));
  EXPECT_EQ(s.backward_constants, (std::vector<int>{0}));
  EXPECT_EQ(print_graph(s.backward),
            "graph {\n"
            "  input %0 : f32[4, 16] cpu  # user saved0\n"
            "  input %1 : f32[4, 8] cpu  # user saved1\n"
            "  input %2 : f32[] cpu  # user dy\n"
            "  const %3 : f32[16] cpu\n"
            "  %4 : f32[4, 16] cpu = aten::expand(%2, [4, 16])\n"
            "  %5 : f32[4, 16] cpu = aten::mul(%4, %3)\n"
            "  %6 : f32[4, 16] cpu = aten::threshold_backward(%5, %0, 0.0)\n"
            "  %7 : f32[16, 4] cpu = aten::t(%6)\n"
            "  %8 : f32[16, 8] cpu = aten::mm(%7, %1)\n"
            "  return (%8)\n"
            "}\n");
}

TEST(SplitJoint, RecomputesWhatOnlyTheGradientsReadOfThePrimals) {
  // The gradient of x reads t(w)'s transpose again: a node of the primals that the program's
  // outputs do not need runs in the backward, from the saved w, rather than being saved.
  Graph g = joint();
  const int32_t t = g.intern_op({"aten::t", "", {"self"}, {false}});
  const int32_t mm = g.intern_op({"aten::mm", "", {"self", "mat2"}, {false, false}});
  TensorType wt_type = make_type({8, 16});
  const ValueId w2 = g.nodes[g.add_node(t, {ValueRef{1}}, {wt_type})].outputs[0];
  const ValueId dh = 11;  // threshold_backward's result
  const ValueId dx =
      g.nodes[g.add_node(mm, {ValueRef{dh}, ValueRef{w2}}, {make_type({4, 16})})].outputs[0];
  g.outputs.push_back(dx);
  const JointSplit s = split_joint(g, {false, false, false, true}, 1);
  EXPECT_EQ(s.saved_inputs, (std::vector<int>{-1, 0, 1}));  // relu, x, w
  EXPECT_EQ(s.backward.outputs.size(), 2u);
  EXPECT_EQ(s.forward.nodes.size(), 5u);
  EXPECT_EQ(s.backward.nodes.size(), 7u);
}

TEST(SplitJoint, KeepsInputMutationsInTheForward) {
  // A buffer updated from the forward's values (BatchNorm's running statistics): the forward
  // computes and applies it, even though no output reads it; the backward has no mutation.
  Graph g = joint();
  const ValueId stat = g.add_input(make_type({4, 16}), InputKind::Buffer, "running");
  const int32_t mul = g.intern_op({"aten::mul", "", {"self", "other"}, {false, false}});
  const ValueId upd = g.nodes[g.add_node(mul, {ValueRef{5}, ValueRef{stat}}, {make_type({4, 16})})]
                          .outputs[0];  // mm's result times the old statistics
  g.mutations.push_back({stat, upd});
  const JointSplit s = split_joint(g, {false, false, false, true, false}, 1);
  ASSERT_EQ(s.forward.mutations.size(), 1u);
  EXPECT_EQ(s.forward.inputs.size(), 4u);  // x, w, the constant, the buffer
  EXPECT_EQ(s.forward.nodes.size(), 6u);
  EXPECT_TRUE(s.backward.mutations.empty());
  EXPECT_EQ(s.backward.nodes.size(), 5u);
}

TEST(SplitJoint, MinCutRecomputesCheapValuesFromASmallerOne) {
  //   %0 x [4, 8], %1 w [16, 8], %2 dy []
  //   %3 = t(w); %4 = mm(x, %3) [4, 16]; %5 = exp(%4); %6 = mul(%5, %5); %7 = sum(%6)
  //   %8 = expand(dy); %9 = mul(%8, %5); %10 = mul(%9, %6); %11 = t(%10); %12 = mm(%11, x)
  // The backward reads exp's and mul's results (512 bytes); mm's result (256 bytes) makes both.
  Graph g;
  const ValueId x = g.add_input(make_type({4, 8}), InputKind::User, "x");
  const ValueId w = g.add_input(make_type({16, 8}), InputKind::Parameter, "w");
  const ValueId dy = g.add_input(make_type({}), InputKind::User, "dy");
  const int32_t t = op(g, "aten::t", {"self"}), mm = op(g, "aten::mm", {"self", "mat2"});
  const int32_t ex = op(g, "aten::exp", {"self"}), mul = op(g, "aten::mul", {"self", "other"});
  const int32_t sum = op(g, "aten::sum", {"self"});
  const int32_t expand = op(g, "aten::expand", {"self", "size"});
  auto node = [&](int32_t o, std::vector<Arg> args, Dims sizes) {
    return g.nodes[g.add_node(o, std::move(args), {make_type(std::move(sizes))})].outputs[0];
  };
  const ValueId h = node(mm, {ValueRef{x}, ValueRef{node(t, {ValueRef{w}}, {8, 16})}}, {4, 16});
  const ValueId a = node(ex, {ValueRef{h}}, {4, 16});
  const ValueId b = node(mul, {ValueRef{a}, ValueRef{a}}, {4, 16});
  const ValueId y = node(sum, {ValueRef{b}}, {});
  const ValueId e = node(expand, {ValueRef{dy}, std::vector<int64_t>{4, 16}}, {4, 16});
  const ValueId g1 =
      node(mul, {ValueRef{node(mul, {ValueRef{e}, ValueRef{a}}, {4, 16})}, ValueRef{b}}, {4, 16});
  const ValueId dw = node(mm, {ValueRef{node(t, {ValueRef{g1}}, {16, 4})}, ValueRef{x}}, {16, 8});
  g.outputs = {y, dw};
  const std::vector<bool> tangent = {false, false, true};

  const JointSplit plain = split_joint(g, tangent, 1);
  EXPECT_EQ(plain.saved_bytes, 256 + 256 + 128);  // exp's and mul's (4 x 16 f32), x (4 x 8)
  SplitOptions o;
  o.recomputable = [](const Graph& gg, const Node& n) {
    const std::string name = gg.op_of(n).name;
    return name == "aten::exp" || name == "aten::mul" || name == "aten::t";
  };
  const JointSplit cut = split_joint(g, tangent, 1, o);
  EXPECT_EQ(cut.saved_bytes, 256 + 128);  // mm's result and x
  EXPECT_EQ(cut.saved_inputs, (std::vector<int>{-1, 0}));
  EXPECT_EQ(print_graph(cut.backward),
            "graph {\n"
            "  input %0 : f32[4, 16] cpu  # user saved0\n"
            "  input %1 : f32[4, 8] cpu  # user saved1\n"
            "  input %2 : f32[] cpu  # user dy\n"
            // Recomputed values come just before their first reader, not first: exp before the
            // product that reads it, the square after the tangent's expand.
            "  %3 : f32[4, 16] cpu = aten::expand(%2, [4, 16])\n"
            "  %4 : f32[4, 16] cpu = aten::exp(%0)\n"
            "  %5 : f32[4, 16] cpu = aten::mul(%3, %4)\n"
            "  %6 : f32[4, 16] cpu = aten::mul(%4, %4)\n"
            "  %7 : f32[4, 16] cpu = aten::mul(%5, %6)\n"
            "  %8 : f32[16, 4] cpu = aten::t(%7)\n"
            "  %9 : f32[16, 8] cpu = aten::mm(%8, %1)\n"
            "  return (%9)\n"
            "}\n");
}

// Note [Recompute reads few large tensors]: a residual stream h_k = h_{k-1} + o_k (f32 plus
// bf16) whose h_1 ... h_6 the backward reads. The cheapest cut saves h_1 and o_2 ... o_6 (896
// bytes) and recomputes h_2 ... h_6, h_6 from six tensors; with the limit of three it saves h_4
// too and recomputes the two after each saved h_k from it.
TEST(SplitJoint, MinCutRecomputeReadsAtMostThreeLargeTensors) {
  Graph g;
  const ValueId h0 = g.add_input(make_type({4, 16}), InputKind::User, "h0");
  std::vector<ValueId> o;
  for (int k = 1; k <= 6; ++k) {
    TensorType t = make_type({4, 16});
    t.dtype = DType::BFloat16;
    o.push_back(g.add_input(t, InputKind::User, "o" + std::to_string(k)));
  }
  const ValueId dy = g.add_input(make_type({}), InputKind::User, "dy");
  const int32_t add = op(g, "aten::add", {"self", "other"});
  const int32_t mul = op(g, "aten::mul", {"self", "other"}), sum = op(g, "aten::sum", {"self"});
  const int32_t expand = op(g, "aten::expand", {"self", "size"});
  auto node = [&](int32_t o, std::vector<Arg> args, Dims sizes) {
    return g.nodes[g.add_node(o, std::move(args), {make_type(std::move(sizes))})].outputs[0];
  };
  std::vector<ValueId> h = {h0};
  for (int k = 0; k < 6; ++k) h.push_back(node(add, {ValueRef{h.back()}, ValueRef{o[k]}}, {4, 16}));
  const ValueId y = node(sum, {ValueRef{h.back()}}, {});
  const ValueId e = node(expand, {ValueRef{dy}, std::vector<int64_t>{4, 16}}, {4, 16});
  ValueId grad = node(mul, {ValueRef{e}, ValueRef{h[1]}}, {4, 16});
  for (int k = 2; k <= 6; ++k) {
    grad = node(add, {ValueRef{grad}, ValueRef{node(mul, {ValueRef{e}, ValueRef{h[k]}}, {4, 16})}},
                {4, 16});
  }
  g.outputs = {y, grad};
  std::vector<bool> tangent(8, false);
  tangent.back() = true;
  SplitOptions opts;
  opts.recomputable = [](const Graph& gg, const Node& n) {
    return gg.op_of(n).name == "aten::add";
  };
  const JointSplit cut = split_joint(g, tangent, 1, opts);
  // h_1, h_4, o_2, o_3, o_5, o_6
  EXPECT_EQ(cut.saved_bytes, 2 * 256 + 4 * 128) << print_graph(cut.backward);
  int recomputed = 0;
  for (const Node& n : cut.backward.nodes) {
    if (cut.backward.op_of(n).name != "aten::add") continue;
    for (const Arg& a : n.args) {  // h_{k-1} + o_k: reads a saved bf16 value
      const auto* r = std::get_if<ValueRef>(&a);
      recomputed += r && cut.backward.type(r->id).dtype == DType::BFloat16 ? 1 : 0;
    }
  }
  EXPECT_EQ(recomputed, 4) << print_graph(cut.backward);  // h_2, h_3, h_5, h_6
}

// Note [Values the backward writes anyway are saved]: a = exp(h) (f32, h bf16) is read by the
// backward's product through a transpose. The cheapest cut saves h and recomputes a, which the
// backward then writes for the product; with reads_memory and is_view a is saved.
TEST(SplitJoint, SavesWhatABackwardProductReads) {
  Graph g;
  TensorType bf16 = make_type({4, 16});
  bf16.dtype = DType::BFloat16;
  const ValueId h = g.add_input(bf16, InputKind::User, "h");
  const ValueId dy = g.add_input(make_type({}), InputKind::User, "dy");
  const int32_t ex = op(g, "aten::exp", {"self"}), sum = op(g, "aten::sum", {"self"});
  const int32_t t = op(g, "aten::t", {"self"}), mm = op(g, "aten::mm", {"self", "mat2"});
  const int32_t expand = op(g, "aten::expand", {"self", "size"});
  auto node = [&](int32_t o, std::vector<Arg> args, Dims sizes) {
    return g.nodes[g.add_node(o, std::move(args), {make_type(std::move(sizes))})].outputs[0];
  };
  const ValueId a = node(ex, {ValueRef{h}}, {4, 16});
  const ValueId y = node(sum, {ValueRef{a}}, {});
  const ValueId e = node(expand, {ValueRef{dy}, std::vector<int64_t>{4, 16}}, {4, 16});
  const ValueId grad = node(mm, {ValueRef{node(t, {ValueRef{a}}, {16, 4})}, ValueRef{e}}, {16, 16});
  g.outputs = {y, grad};
  auto name = [](const Graph& gg, const Node& n) { return gg.op_of(n).name; };
  SplitOptions opts;
  opts.recomputable = [&](const Graph& gg, const Node& n) {
    return name(gg, n) == "aten::exp" || name(gg, n) == "aten::t";
  };
  EXPECT_EQ(split_joint(g, {false, true}, 1, opts).saved_bytes, 128);  // h; exp recomputed
  opts.reads_memory = [&](const Graph& gg, const Node& n) { return name(gg, n) == "aten::mm"; };
  opts.is_view = [&](const Graph& gg, const Node& n) { return name(gg, n) == "aten::t"; };
  const JointSplit cut = split_joint(g, {false, true}, 1, opts);
  EXPECT_EQ(cut.saved_bytes, 256);  // a
  for (const Node& n : cut.backward.nodes) EXPECT_NE(name(cut.backward, n), "aten::exp");
}

TEST(SplitJoint, RejectsAForwardOutputThatReadsATangent) {
  Graph g = joint();
  g.outputs = {11, 13};  // threshold_backward's result as a "program output"
  EXPECT_THROW(split_joint(g, {false, false, false, true}, 1), InternalError);
}

}  // namespace
}  // namespace ember::graph
