#include "graph/parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "graph/graph_hash.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "graph_builders.h"
#include "support/error.h"

namespace ember::graph {
namespace {

using test::build_sample;
using test::make_op;
using test::make_type;

/// Prints `g`, parses the text and checks that the parsed graph is valid, prints the same, and
/// has the same inputs, values, outputs and mutations. Returns the parsed graph.
Graph expect_round_trip(const Graph& g) {
  EXPECT_EQ(verify_graph(g), std::vector<std::string>{});
  std::string text = print_graph(g);
  Graph parsed = parse_graph(text);
  EXPECT_EQ(verify_graph(parsed), std::vector<std::string>{});
  EXPECT_EQ(print_graph(parsed), text);
  EXPECT_EQ(parsed.values.size(), g.values.size());
  for (size_t v = 0; v < g.values.size() && v < parsed.values.size(); ++v) {
    EXPECT_EQ(parsed.values[v].type, g.values[v].type) << "%" << v;
    EXPECT_EQ(parsed.values[v].node, g.values[v].node) << "%" << v;
    EXPECT_EQ(parsed.values[v].index, g.values[v].index) << "%" << v;
  }
  EXPECT_EQ(parsed.inputs.size(), g.inputs.size());
  for (size_t i = 0; i < g.inputs.size() && i < parsed.inputs.size(); ++i) {
    EXPECT_EQ(parsed.inputs[i].value, g.inputs[i].value);
    EXPECT_EQ(parsed.inputs[i].kind, g.inputs[i].kind);
    EXPECT_EQ(parsed.inputs[i].name, g.inputs[i].name);
  }
  EXPECT_EQ(parsed.nodes.size(), g.nodes.size());
  for (size_t n = 0; n < g.nodes.size() && n < parsed.nodes.size(); ++n) {
    EXPECT_EQ(parsed.nodes[n].outputs, g.nodes[n].outputs) << "node " << n;
    const OpInfo& op = parsed.op_of(parsed.nodes[n]);
    EXPECT_EQ(op.qualified_name(), g.op_of(g.nodes[n]).qualified_name());
    EXPECT_EQ(op.kwarg_only, g.op_of(g.nodes[n]).kwarg_only);
    EXPECT_EQ(op.returns_list, g.op_of(g.nodes[n]).returns_list);
  }
  EXPECT_EQ(parsed.outputs, g.outputs);
  EXPECT_EQ(parsed.mutations.size(), g.mutations.size());
  for (size_t i = 0; i < g.mutations.size() && i < parsed.mutations.size(); ++i) {
    EXPECT_EQ(parsed.mutations[i].input, g.mutations[i].input);
    EXPECT_EQ(parsed.mutations[i].value, g.mutations[i].value);
  }
  // The parse of a print is a fixed point: parsing its print gives a structurally equal graph.
  EXPECT_EQ(hash_graph(parse_graph(print_graph(parsed))), hash_graph(parsed));
  return parsed;
}

TEST(ParseGraph, RoundTripsTheSampleGraph) {
  Graph g = build_sample();
  Graph parsed = expect_round_trip(g);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    EXPECT_EQ(parsed.nodes[n].args, g.nodes[n].args) << "node " << n;
  }
}

TEST(ParseGraph, ReadsTheDocumentedText) {
  const std::string text =
      "graph {\n"
      "  input %0 : f32[2, 3] cpu  # user x\n"
      "  const %1 : f32[3] cpu\n"
      "  %2 : f32[2, 3] cpu = aten::add.Tensor(%0, %1, alpha=1)\n"
      "  mutate %0 <- %2\n"
      "  return (%2)\n"
      "}\n";
  Graph g = parse_graph(text);
  EXPECT_EQ(print_graph(g), text);
  ASSERT_EQ(g.inputs.size(), 2u);
  EXPECT_EQ(g.inputs[0].kind, InputKind::User);
  EXPECT_EQ(g.inputs[0].name, "x");
  EXPECT_EQ(g.inputs[1].kind, InputKind::Constant);
  EXPECT_EQ(g.inputs[1].name, "");
  EXPECT_EQ(g.type(2), make_type({2, 3}));
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].args, (std::vector<Arg>{ValueRef{0}, ValueRef{1}, int64_t{1}}));
  EXPECT_EQ(g.outputs, std::vector<ValueId>{2});
}

TEST(ParseGraph, RecordsWhatTheTextCarriesOfEachOp) {
  Graph g = parse_graph(
      "graph {\n"
      "  input %0 : f32[4] cpu  # user x\n"
      "  %1 : f32[4] cpu = aten::add.Tensor(%0, %0, alpha=2)\n"
      "  %2 : f32[4] cpu = aten::add.Tensor(%1, %0, alpha=1)\n"
      "  [%3 : f32[2] cpu, %4 : f32[2] cpu] = aten::split.Tensor(%2, 2)\n"
      "  return (%3)\n"
      "}\n");
  ASSERT_EQ(g.ops.size(), 2u);  // both adds share one interned op
  EXPECT_EQ(g.nodes[0].op, g.nodes[1].op);
  EXPECT_EQ(g.ops[0], make_op("aten::add", "Tensor", {"", "", "alpha"}, {false, false, true}));
  EXPECT_EQ(g.ops[1], make_op("aten::split", "Tensor", {"", ""}, {false, false}, true));
  EXPECT_TRUE(g.nodes[2].result_slots.empty());
}

TEST(ParseGraph, RoundTripsEveryArgumentForm) {
  Graph g;
  ValueId x = g.add_input(make_type({2}), InputKind::User, "x");
  ValueId y = g.add_input(make_type({2}), InputKind::User, "y");
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Arg> args = {
      NoneArg{},
      true,
      false,
      int64_t{0},
      int64_t{-3},
      std::numeric_limits<int64_t>::min(),
      std::numeric_limits<int64_t>::max(),
      1.0,
      -0.0,
      0.1 + 0.2,
      1.5e-5,
      1e16,
      -2.5e-300,
      std::numeric_limits<double>::max(),
      std::numeric_limits<double>::denorm_min(),
      inf,
      -inf,
      std::string(""),
      std::string("a\\b\"c\n\t\r\x01\x7f # %0 [x] caf\xc3\xa9"),
      std::vector<int64_t>{1, -2, 3},
      std::vector<int64_t>{},
      std::vector<double>{0.5, -inf, 2.0},
      std::vector<bool>{true, false},
      DType::Float16,
      DType::Float8_e4m3fn,
      DType::ComplexDouble,
      static_cast<DType>(99),
      static_cast<DType>(-2),
      Device{},
      Device{DeviceKind::CUDA, 1},
      Device{DeviceKind::Meta, -1},
      Device{DeviceKind::PrivateUse1, 2},
      Device{static_cast<DeviceKind>(5), 0},
      Layout::Strided,
      Layout::SparseCsr,
      static_cast<Layout>(9),
      MemoryFormat::Contiguous,
      MemoryFormat::Preserve,
      MemoryFormat::ChannelsLast3d,
      static_cast<MemoryFormat>(7),
      ValueRef{y},
      ValueList{{x, std::nullopt, y}, true},
      ValueList{{y, x}, false},
      ValueList{{std::nullopt}, true},
  };
  std::vector<std::string> names;
  for (size_t i = 0; i < args.size(); ++i) names.push_back("a" + std::to_string(i));
  // Half the arguments positional, half kwarg-only, so that each form appears both ways.
  std::vector<bool> kwarg_only(args.size());
  for (size_t i = args.size() / 2; i < args.size(); ++i) kwarg_only[i] = true;
  int32_t op = g.intern_op(make_op("ember::everything", "", names, kwarg_only));
  g.add_node(op, args, {make_type({2})});
  // The same forms once more, all positional, and NaN, whose sign the text does not carry.
  int32_t op2 =
      g.intern_op(make_op("ember::positional", "default", std::vector<std::string>(args.size() + 1),
                          std::vector<bool>(args.size() + 1)));
  args.push_back(std::numeric_limits<double>::quiet_NaN());
  g.add_node(op2, args, {});

  Graph parsed = expect_round_trip(g);
  args.pop_back();
  for (size_t i = 0; i < args.size(); ++i) {
    EXPECT_EQ(parsed.nodes[0].args[i], args[i]) << print_arg(args[i]);
    EXPECT_EQ(parsed.nodes[1].args[i], args[i]) << print_arg(args[i]);
    EXPECT_EQ(parsed.ops[0].arg_names[i], kwarg_only[i] ? names[i] : "");
  }
  const double* nan = std::get_if<double>(&parsed.nodes[1].args.back());
  ASSERT_NE(nan, nullptr);
  EXPECT_TRUE(std::isnan(*nan));
  // -0.0 keeps its sign.
  EXPECT_TRUE(std::signbit(std::get<double>(parsed.nodes[0].args[8])));
}

TEST(ParseGraph, RoundTripsEveryTypeForm) {
  Graph g;
  auto add = [&](TensorType t) { g.add_input(std::move(t), InputKind::User); };
  add(make_type({}));
  add(make_type({0, 3}, DType::Bool));
  add(make_type({2, 1, 4}, DType::BFloat16));
  TensorType strided = make_type({3, 2}, DType::Int64);
  strided.strides = {1, -3};
  strided.storage_offset = 12;
  add(strided);
  TensorType offset_only = make_type({5});
  offset_only.storage_offset = -1;
  add(offset_only);
  TensorType broadcast = make_type({4, 4});
  broadcast.strides = {0, 0};
  broadcast.device = Device{DeviceKind::CUDA, 7};
  broadcast.requires_grad = true;
  add(broadcast);
  TensorType odd = make_type({1}, static_cast<DType>(99));
  odd.device = Device{static_cast<DeviceKind>(5), -1};
  add(odd);
  TensorType meta = make_type({2, 2}, DType::Float8_e5m2);
  meta.device = Device{DeviceKind::Meta, -1};
  meta.requires_grad = true;
  add(meta);
  expect_round_trip(g);
}

TEST(ParseGraph, RoundTripsInputKindsAndNames) {
  Graph g;
  g.add_input(make_type({1}), InputKind::User, "x");
  g.add_input(make_type({1}), InputKind::User);
  g.add_input(make_type({1}), InputKind::User, "L['x'] y");
  g.add_input(make_type({1}), InputKind::Parameter, "layer.0.weight");
  g.add_input(make_type({1}), InputKind::Buffer, "a\"b\\c\td\x01");
  g.add_input(make_type({1}), InputKind::Buffer, "#%[]{}=caf\xc3\xa9");
  g.add_input(make_type({1}), InputKind::Constant);
  g.add_input(make_type({1}), InputKind::Constant, "user");
  g.add_input(make_type({1}), InputKind::Constant, "two words");
  g.add_input(make_type({1}), InputKind::Constant, "\"");
  expect_round_trip(g);
}

TEST(ParseGraph, RoundTripsEveryOutputForm) {
  Graph g;
  ValueId x = g.add_input(make_type({0, 2}), InputKind::User, "x");
  int32_t unbind =
      g.intern_op(make_op("aten::unbind", "int", {"self", "dim"}, {false, false}, true));
  int32_t relu = g.intern_op(make_op("aten::relu", "", {"self"}, {false}));
  int32_t tuple = g.intern_op(make_op("aten::aminmax", "", {"self"}, {false}));
  int32_t check = g.intern_op(make_op("aten::_check", "", {"self"}, {false}));
  g.add_node(unbind, {ValueRef{x}, int64_t{0}}, {});
  g.add_node(unbind, {ValueRef{x}, int64_t{1}}, {make_type({0})});
  g.add_node(unbind, {ValueRef{x}, int64_t{1}}, {make_type({0}), make_type({0})});
  g.add_node(relu, {ValueRef{x}}, {make_type({0, 2})});
  int32_t mm = g.add_node(tuple, {ValueRef{x}}, {make_type({}), make_type({})});
  g.add_node(check, {ValueRef{g.nodes[mm].outputs[0]}}, {});
  g.outputs = {x, x, g.nodes[mm].outputs[1]};
  Graph parsed = expect_round_trip(g);
  EXPECT_EQ(parsed.ops.size(), 4u);
}

TEST(ParseGraph, RoundTripsValueIdsOutOfTextOrder) {
  // A pass may add a constant input after some nodes: its id is larger than theirs, yet the
  // printer lists it with the inputs.
  Graph g;
  ValueId x = g.add_input(make_type({3}), InputKind::User, "x");
  int32_t neg = g.intern_op(make_op("aten::neg", "", {"self"}, {false}));
  int32_t add = g.intern_op(make_op("aten::add", "Tensor", {"self", "other"}, {false, false}));
  ValueId a = g.nodes[g.add_node(neg, {ValueRef{x}}, {make_type({3})})].outputs[0];
  ValueId c = g.add_input(make_type({3}), InputKind::Constant, "folded");
  ValueId s = g.nodes[g.add_node(add, {ValueRef{a}, ValueRef{c}}, {make_type({3})})].outputs[0];
  g.mutations.push_back(Mutation{x, s});
  g.outputs = {s};
  EXPECT_EQ(print_graph(g),
            "graph {\n"
            "  input %0 : f32[3] cpu  # user x\n"
            "  const %2 : f32[3] cpu  # folded\n"
            "  %1 : f32[3] cpu = aten::neg(%0)\n"
            "  %3 : f32[3] cpu = aten::add.Tensor(%1, %2)\n"
            "  mutate %0 <- %3\n"
            "  return (%3)\n"
            "}\n");
  expect_round_trip(g);
}

TEST(ParseGraph, RoundTripsAnEmptyGraph) {
  expect_round_trip(Graph{});
}

TEST(ParseGraph, DropsOnlyWhatTheTextDoesNotCarry) {
  Graph g;
  ValueId x = g.add_input(make_type({2}), InputKind::User, "x");
  int32_t op = g.intern_op(make_op("aten::cat", "", {"tensors", "dim"}, {false, false}));
  g.intern_op(make_op("aten::unused", "", {}, {}));
  int32_t n = g.add_node(op, {ValueList{{x, x}, true}, std::vector<double>{}}, {make_type({4})});
  g.nodes[n].result_slots = {0};
  g.outputs = {g.nodes[n].outputs[0]};
  Graph parsed = expect_round_trip(g);
  EXPECT_EQ(parsed.ops.size(), 1u);
  EXPECT_EQ(parsed.ops[0].arg_names, (std::vector<std::string>{"", ""}));
  EXPECT_TRUE(parsed.nodes[0].result_slots.empty());
  EXPECT_EQ(parsed.nodes[0].args[0], Arg(ValueList{{x, x}, false}));
  EXPECT_EQ(parsed.nodes[0].args[1], Arg(std::vector<int64_t>{}));
}

TEST(ParseGraph, AcceptsFreeFormattingAndComments) {
  Graph g = parse_graph(
      "# a graph\n"
      "graph{input %0:f32[2,3]{1,2}+1 cuda:0 grad#param w\n"
      "const %1 : i64[] cpu\n"
      "# between nodes\n"
      "%2:f32[2,3]cpu=aten::mul.Tensor(%0,%1)   # a note\n"
      "(%3:f32[2]cpu,%4:f32[2]cpu)=aten::f(%2,k=[None,%1])\n"
      "return(%2,%3)}");
  EXPECT_EQ(print_graph(g),
            "graph {\n"
            "  input %0 : f32[2, 3]{1, 2}+1 cuda:0 grad  # param w\n"
            "  const %1 : i64[] cpu\n"
            "  %2 : f32[2, 3] cpu = aten::mul.Tensor(%0, %1)\n"
            "  (%3 : f32[2] cpu, %4 : f32[2] cpu) = aten::f(%2, k=[None, %1])\n"
            "  return (%2, %3)\n"
            "}\n");
}

/// The message of the UserError that parsing `text` throws.
std::string parse_error(const std::string& text) {
  try {
    parse_graph(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

/// A graph text whose lines are `body` between the header and `return (...)`.
std::string graph_text(const std::string& body, const std::string& ret = "") {
  return "graph {\n" + body + "  return (" + ret + ")\n}\n";
}

TEST(ParseGraphErrors, ReportBadTokens) {
  EXPECT_EQ(parse_error("graph {\n  input %0 : f32[2] cpu  # user x\n  @\n}\n"),
            "line 3:3: unexpected character '@'");
  EXPECT_EQ(parse_error("graph {\n  return (%x)\n}\n"),
            "line 2:11: expected a value (%N) but found '%'");
  EXPECT_EQ(parse_error("grph {\n}\n"), "line 1:1: expected 'graph' but found 'grph'");
  EXPECT_EQ(parse_error("graph {\n  return ()\n"), "line 3:1: expected '}' but found end of input");
  EXPECT_EQ(parse_error(graph_text("") + "graph"),
            "line 4:1: expected end of input but found 'graph'");
  EXPECT_EQ(parse_error(graph_text("  }\n")),
            "line 2:3: expected a node, 'mutate' or 'return' but found '}'");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n"
                                   "  %1 : f32[2] cpu = aten::f(%0, \"abc)\n")),
            "line 3:33: unterminated string");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n"
                                   "  aten::f(\"a\\qb\")\n")),
            "line 3:13: expected an escape (\\\\ \\\" \\n \\t \\r \\xNN) after '\\'");
}

TEST(ParseGraphErrors, ReportUnknownAndRedefinedValues) {
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n"
                                   "  %1 : f32[2] cpu = aten::neg(%9)\n")),
            "line 3:31: unknown value %9");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n"
                                   "  %1 : f32[2] cpu = aten::neg(%1)\n")),
            "line 3:31: unknown value %1");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n", "%0, %4")),
            "line 3:15: unknown value %4");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n"
                                   "  %0 : f32[2] cpu = aten::neg(%0)\n")),
            "line 3:3: value %0 is defined twice (first at line 2:9)");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x\n"
                                   "  %2 : f32[2] cpu = aten::neg(%0)\n")),
            "line 3:3: value %2 is defined but %1 is not (value ids count up from %0)");
  EXPECT_EQ(parse_error(graph_text("", "%99999999999")),
            "line 2:11: value id %99999999999 is out of range");
}

TEST(ParseGraphErrors, ReportBadTypes) {
  EXPECT_EQ(parse_error(graph_text("  input %0 : f99[2] cpu  # user x\n")),
            "line 2:14: expected a dtype but found 'f99'");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2 3] cpu  # user x\n")),
            "line 2:20: expected ',' but found '3'");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2]  # user x\n")),
            "line 3:3: expected a device but found 'return'");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] gpu  # user x\n")),
            "line 2:21: expected a device but found 'gpu'");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2, 3]{1} cpu  # user x\n")),
            "line 2:23: 1 strides for 2 sizes");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[-2] cpu  # user x\n")),
            "line 2:18: negative size -2");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cuda:500  # user x\n")),
            "line 2:26: device index 500 is out of range");
  EXPECT_EQ(parse_error(graph_text("  input %0 : dtype<300>[2] cpu  # user x\n")),
            "line 2:20: enum code 300 is out of range");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[99999999999999999999] cpu  # user x\n")),
            "line 2:18: integer 99999999999999999999 is out of range");
}

TEST(ParseGraphErrors, ReportBadInputAnnotations) {
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu\n")),
            "line 2:24: expected '# user', '# param' or '# buffer' after input %0");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # weight w\n")),
            "line 2:28: expected user, param or buffer but found 'weight'");
  EXPECT_EQ(parse_error(graph_text("  input %0 : f32[2] cpu  # user x y\n")),
            "line 2:35: expected end of line after the input name but found 'y'");
  EXPECT_EQ(parse_error(graph_text("  const %0 : f32[2] cpu  # \"x\\q\"\n")),
            "line 2:30: expected an escape (\\\\ \\\" \\n \\t \\r \\xNN) after '\\'");
}

TEST(ParseGraphErrors, ReportBadArguments) {
  std::string x = "  input %0 : f32[2] cpu  # user x\n";
  EXPECT_EQ(parse_error(graph_text(x + "  aten::f(%0, [1, 2.0])\n")),
            "line 3:19: expected an int like the list's first item but found 2.0");
  EXPECT_EQ(parse_error(graph_text(x + "  aten::f(%0, [None, 1])\n")),
            "line 3:22: expected %N or None like the list's first item but found 1");
  EXPECT_EQ(
      parse_error(graph_text(x + "  aten::f(%0, [\"a\"])\n")),
      "line 3:16: expected a list item (None, True, False, a number or %N) but found '\"a\"'");
  EXPECT_EQ(parse_error(graph_text(x + "  aten::f(%0, bogus)\n")),
            "line 3:15: expected an argument but found 'bogus'");
  EXPECT_EQ(parse_error(graph_text(x + "  aten::f(%0, -x)\n")),
            "line 3:16: expected a number but found 'x'");
  EXPECT_EQ(parse_error(graph_text(x + "  aten::f(%0, 1e999)\n")),
            "line 3:15: float 1e999 is out of range");
  EXPECT_EQ(parse_error(graph_text(x + "  %1 : f32[2] cpu aten::f(%0)\n")),
            "line 3:19: expected '=' but found 'aten'");
  EXPECT_EQ(parse_error(graph_text(x + "  %1 : f32[2] cpu = (%0)\n")),
            "line 3:21: expected an op name but found '('");
}

TEST(ParseGraphErrors, ReportInvalidMutations) {
  std::string inputs =
      "  input %0 : f32[2] cpu  # user x\n"
      "  const %1 : f32[2] cpu\n"
      "  input %2 : i64[2] cpu  # buffer b\n"
      "  input %3 : f32[3] cpu  # buffer c\n"
      "  %4 : f32[2] cpu = aten::neg(%0)\n";
  EXPECT_EQ(parse_error(graph_text(inputs + "  mutate %4 <- %0\n")),
            "line 7:10: mutation target %4 is not a graph input");
  EXPECT_EQ(parse_error(graph_text(inputs + "  mutate %1 <- %4\n")),
            "line 7:10: mutation target %1 is a constant");
  EXPECT_EQ(parse_error(graph_text(inputs + "  mutate %2 <- %4\n")),
            "line 7:16: mutation writes f32 %4 into i64 %2");
  EXPECT_EQ(parse_error(graph_text(inputs + "  mutate %3 <- %4\n")),
            "line 7:16: mutation writes %4 of sizes [2] into %3 of sizes [3]");
  EXPECT_EQ(parse_error(graph_text(inputs + "  mutate %0 <- %7\n")), "line 7:16: unknown value %7");
}

}  // namespace
}  // namespace ember::graph

namespace ember::graph {
namespace {

// A graph over shape symbols (issue 35): symbol lines, symbolic sizes, strides and offsets, and
// symbolic int and int-list arguments print, parse back equal and hash apart from their static
// versions.
TEST(ParseGraph, RoundTripsSymbolicSizesAndArguments) {
  Graph g;
  sym::SymExpr s0 = g.symbols.create_size(7, "L['x'].size()[0]");
  sym::SymExpr s1 = g.symbols.create_size(16, "L['x'].size()[1]");
  TensorType x = make_type({2, 3});
  x.sizes = {DimExpr(s0), DimExpr(s1), 768};
  x.strides = contiguous_strides(x.sizes);
  ValueId in = g.add_input(x, InputKind::User, "L['x']");
  TensorType flat = x;
  flat.sizes = {DimExpr(s0 * s1), 768};
  flat.strides = contiguous_strides(flat.sizes);
  int32_t view = g.intern_op(make_op("aten::view", "", {"self", "size"}, {false, false}, false));
  g.add_node(view, {ValueRef{in}, int_list_arg({DimExpr(s0 * s1), 768})}, {flat});
  TensorType part = flat;
  part.sizes = {DimExpr(sym::floordiv(s0 * s1 + 1, 2)), 768};
  part.storage_offset = DimExpr(s1 * 768);
  int32_t slice = g.intern_op(make_op("aten::slice", "Tensor", {"self", "dim", "start", "end"},
                                      {false, false, false, false}, false));
  g.add_node(slice,
             {ValueRef{1}, int64_t{0}, int_arg(DimExpr(s1)), int_arg(DimExpr(sym::min(s0, s1)))},
             {part});
  g.outputs = {2};
  Graph parsed = expect_round_trip(g);
  std::string text = print_graph(parsed);
  EXPECT_NE(text.find("symbol s0 : [2, inf] hint 7 \"L['x'].size()[0]\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("f32[s0, s1, 768]"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::view(%0, [s0*s1, 768])"), std::string::npos) << text;
  EXPECT_NE(text.find("+(s1*768)"), std::string::npos) << text;
  EXPECT_NE(text.find("min(s0, s1)"), std::string::npos) << text;
  ASSERT_EQ(parsed.symbols.symbols().size(), 2u);
  EXPECT_EQ(parsed.symbols.info(1).hint, 16);
  EXPECT_EQ(parsed.symbols.info(1).source, "L['x'].size()[1]");
  EXPECT_TRUE(std::holds_alternative<Dims>(parsed.nodes[0].args[1]));
  EXPECT_TRUE(std::holds_alternative<DimExpr>(parsed.nodes[1].args[3]));
  EXPECT_FALSE(parsed.type(0).is_static());

  // A different hint is a different graph (the scheduler picks strategies from hints).
  Graph other = parse_graph(std::string(text).replace(text.find("hint 7"), 6, "hint 9"));
  EXPECT_NE(hash_graph(other), hash_graph(parsed));
}

TEST(ParseGraphErrors, ReportBadSymbols) {
  auto error = [](const std::string& text) {
    try {
      parse_graph(text);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("graph {\n  symbol s1 : [2, inf] hint 4\n  return ()\n}\n"),
            "line 2:10: expected symbol s0 (symbols are numbered in order) but found s1");
  EXPECT_EQ(error("graph {\n  symbol s0 : [2, 8] hint 9\n  return ()\n}\n"),
            "line 2:27: hint 9 is outside the range [2, 8]");
  std::string unknown = error(
      "graph {\n  symbol s0 : [2, inf] hint 4\n  input %0 : f32[s0*s3] cpu  # user\n  return "
      "(%0)\n}\n");
  EXPECT_NE(unknown.find("line 3:18: in the size expression 's0 * s3'"), std::string::npos)
      << unknown;
}

TEST(ParseGraph, AMutationOfAnInputWithAPinnedSymbolVerifies) {
  // A symbol a guard pinned to a constant stays in its input's type (the runtime binds it) while
  // the nodes' types fold it: the mutation's sizes compare as equal (an optimizer step's state
  // under dynamic=True), in the parser and the verifier alike.
  const std::string text =
      "graph {\n"
      "  symbol s0 : [8, 8] hint 8 \"L['buf'].size()[0]\"\n"
      "  input %0 : f32[s0] cpu  # user buf\n"
      "  %1 : f32[8] cpu = aten::mul.Scalar(%0, 2)\n"
      "  mutate %0 <- %1\n"
      "  return ()\n"
      "}\n";
  Graph g = parse_graph(text);
  EXPECT_NO_THROW(check_graph(g));
  EXPECT_EQ(print_graph(g), text);
  const std::string wrong =
      std::string(text).replace(text.find("[8, 8] hint 8"), 13, "[2, inf] hint 8");
  EXPECT_THROW(parse_graph(wrong), UserError);
}

TEST(DimExpr, ConstantsStayConstantsAndSymbolsDoNot) {
  sym::ShapeEnv env;
  sym::SymExpr s0 = env.create_size(5, "a");
  EXPECT_TRUE(DimExpr(sym::SymExpr(4)).is_constant());
  EXPECT_EQ(DimExpr(s0 - s0), DimExpr(0));
  EXPECT_FALSE(DimExpr(s0).is_constant());
  EXPECT_EQ((DimExpr(3) * DimExpr(4)).constant(), 12);
  EXPECT_EQ((DimExpr(s0) * 2).str(), "s0*2");
  EXPECT_EQ(sym_numel({DimExpr(s0), 3}).str(), "s0*3");
  EXPECT_EQ(contiguous_strides({DimExpr(s0), 1, 4}), (Dims{4, 4, 1}));
  EXPECT_EQ(contiguous_strides({2, DimExpr(s0), 4}), (Dims{DimExpr(s0 * 4), 4, 1}));
  EXPECT_THROW(DimExpr(s0).constant(), Unsupported);
  EXPECT_EQ(int_arg(DimExpr(s0 - s0 + 3)), Arg{int64_t{3}});
  EXPECT_EQ(int_list_arg({1, 2}), Arg(std::vector<int64_t>({1, 2})));
}

}  // namespace
}  // namespace ember::graph
