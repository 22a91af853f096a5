#include "graph/printer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "graph/verifier.h"
#include "graph_builders.h"

namespace ember::graph {
namespace {

using test::build_sample;
using test::make_op;
using test::make_type;

TEST(PrintGraph, PrintsTheSampleGraphExactly) {
  Graph g = build_sample();
  ASSERT_EQ(verify_graph(g), std::vector<std::string>{});
  EXPECT_EQ(print_graph(g),
            "graph {\n"
            "  input %0 : f32[2, 3] cpu  # user x\n"
            "  input %1 : f32[3] cpu grad  # param weight\n"
            "  input %2 : f32[3] cpu  # buffer running_mean\n"
            "  const %3 : i64[3] cpu\n"
            "  const %4 : f32[] cpu  # scale\n"
            "  input %5 : f32[3, 2]{1, 3}+4 cpu  # user\n"
            "  %6 : f32[2, 3] cpu = aten::add.Tensor(%0, %1, alpha=1)\n"
            "  (%7 : f32[3] cpu, %8 : f32[3] cpu) = aten::var_mean.correction(%6, [0], "
            "correction=1.0, keepdim=False)\n"
            "  %9 : f32[2, 3] cpu = aten::index.Tensor(%0, [None, %3])\n"
            "  [%10 : f32[3] cpu, %11 : f32[3] cpu] = aten::unbind.int(%5, 1)\n"
            "  %12 : bf16[3] cpu = aten::_to_copy(%8, dtype=bf16, layout=strided, device=cuda:0, "
            "memory_format=contiguous_format)\n"
            "  aten::_assert_async.msg(%0, \"x \\\"must\\\" be\\tok\\n\")\n"
            "  mutate %2 <- %8\n"
            "  return (%6, %9)\n"
            "}\n");
}

TEST(PrintGraph, IsDeterministic) {
  EXPECT_EQ(print_graph(build_sample()), print_graph(build_sample()));
}

TEST(PrintGraph, PrintsAnEmptyGraph) {
  EXPECT_EQ(print_graph(Graph{}), "graph {\n  return ()\n}\n");
}

TEST(PrintGraph, QuotesInputNamesThatCouldBeMisread) {
  Graph g;
  g.add_input(make_type({1}), InputKind::User, "L['x'] y");
  EXPECT_EQ(print_graph(g),
            "graph {\n  input %0 : f32[1] cpu  # user \"L['x'] y\"\n  return ()\n}\n");
}

TEST(PrintGraph, ListReturnsUseBracketsEvenWhenEmpty) {
  Graph g;
  ValueId x = g.add_input(make_type({0, 2}), InputKind::User, "x");
  int32_t unbind =
      g.intern_op(make_op("aten::unbind", "int", {"self", "dim"}, {false, false}, true));
  g.add_node(unbind, {ValueRef{x}, int64_t{0}}, {});
  EXPECT_NE(print_graph(g).find("  [] = aten::unbind.int(%0, 0)\n"), std::string::npos);
}

TEST(PrintGraph, PrintsBrokenGraphsWithoutCrashing) {
  Graph g = build_sample();
  g.nodes[0].op = 42;
  g.nodes[1].outputs.push_back(99);
  g.nodes[2].args.push_back(ValueRef{77});
  std::string text = print_graph(g);
  EXPECT_NE(text.find("  %6 : f32[2, 3] cpu = <op 42>(%0, %1, 1)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("%99 : <undefined>) = aten::var_mean"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::index.Tensor(%0, [None, %3], %77)"), std::string::npos) << text;
}

TEST(PrintArg, PrintsScalarsLikePython) {
  EXPECT_EQ(print_arg(NoneArg{}), "None");
  EXPECT_EQ(print_arg(true), "True");
  EXPECT_EQ(print_arg(false), "False");
  EXPECT_EQ(print_arg(int64_t{-3}), "-3");
  EXPECT_EQ(print_arg(std::numeric_limits<int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(print_arg(std::string("a\\b\x01")), "\"a\\\\b\\x01\"");
  EXPECT_EQ(print_arg(std::string("")), "\"\"");
}

TEST(PrintArg, PrintsListsAndEnums) {
  EXPECT_EQ(print_arg(std::vector<int64_t>{1, 2}), "[1, 2]");
  EXPECT_EQ(print_arg(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(print_arg(std::vector<double>{0.5, 2.0}), "[0.5, 2.0]");
  EXPECT_EQ(print_arg(std::vector<bool>{true, false}), "[True, False]");
  EXPECT_EQ(print_arg(DType::Float16), "f16");
  EXPECT_EQ(print_arg(Device{DeviceKind::CUDA, 1}), "cuda:1");
  EXPECT_EQ(print_arg(Layout::SparseCsr), "sparse_csr");
  EXPECT_EQ(print_arg(MemoryFormat::ChannelsLast), "channels_last");
  EXPECT_EQ(print_arg(ValueRef{7}), "%7");
  EXPECT_EQ(print_arg(ValueList{{1, std::nullopt, 2}, true}), "[%1, None, %2]");
}

TEST(PrintArg, PrintsDoublesAsPythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.5, "0.5"},
      {0.1, "0.1"},
      {0.1 + 0.2, "0.30000000000000004"},
      {-2.5, "-2.5"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {100.0, "100.0"},
      {123.456, "123.456"},
      {1e-4, "0.0001"},
      {1.5e-5, "1.5e-05"},
      {2.5e-7, "2.5e-07"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1.5e300, "1.5e+300"},
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      {std::numeric_limits<double>::denorm_min(), "5e-324"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
  };
  for (const auto& [value, text] : cases) EXPECT_EQ(print_arg(value), text) << value;
}

TEST(PrintArg, DoublesRoundTrip) {
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 10000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    double v;
    uint64_t bits = state;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isnan(v)) continue;
    std::string text = print_arg(v);
    double back = std::strtod(text.c_str(), nullptr);
    EXPECT_EQ(std::memcmp(&back, &v, sizeof v), 0) << text;
  }
}

}  // namespace
}  // namespace ember::graph
