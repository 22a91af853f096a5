#include "loop/parser.h"

#include <gtest/gtest.h>

#include "loop/equality.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "support/error.h"
#include "test_util.h"

namespace ember::loop {
namespace {

using testing::read_golden;

/// Parses `text`, checks that it prints back byte for byte, and that parsing the print gives a
/// structurally equal kernel.
void expect_round_trip(const std::string& text) {
  Kernel k = parse_kernel(text);
  EXPECT_EQ(verify_kernel(k), std::vector<std::string>{});
  std::string printed = print_kernel(k);
  EXPECT_EQ(printed, text);
  Kernel again = parse_kernel(printed);
  EXPECT_TRUE(structurally_equal(k, again));
  EXPECT_EQ(print_kernel(again), printed);
}

TEST(ParseKernel, RoundTripsSoftmax) {
  expect_round_trip(read_golden("softmax.loop"));
}
TEST(ParseKernel, RoundTripsLayerNorm) {
  expect_round_trip(read_golden("layer_norm.loop"));
}
TEST(ParseKernel, RoundTripsArgmaxWithPaddingAndBranches) {
  expect_round_trip(read_golden("argmax_pad.loop"));
}

TEST(ParseKernel, RoundTripsBitwiseOpsAndShifts) {
  expect_round_trip(
      "kernel bits(n) {\n"
      "  input x : i32[n] strides [1]\n"
      "  output y : i32[n] strides [1]\n"
      "  for (i, 0, n) {\n"
      "    y[i] = ((((x[i] & i32(12)) | (x[i] ^ i32(-1))) << i32(3)) >> x[i])\n"
      "  }\n"
      "}\n");
}

TEST(ParseKernel, RoundTripsAParallelLoopWithItsRunTimeCondition) {
  const std::string text =
      "kernel scale(n, m) {\n"
      "  input x : f32[n, m] strides [m, 1]\n"
      "  output y : f32[n, m] strides [m, 1]\n"
      "  for (i, 0, n) parallel if (32768 <= (n * m)) {\n"
      "    for (j, 0, m) vectorized {\n"
      "      y[(j + (i * m))] = (x[(j + (i * m))] * f32(2))\n"
      "    }\n"
      "  }\n"
      "}\n";
  expect_round_trip(text);
  const Kernel k = parse_kernel(text);
  const auto* loop = k.body.as<For>();
  ASSERT_NE(loop, nullptr);
  ASSERT_TRUE(loop->parallel_when.defined());
  EXPECT_EQ(loop->parallel_when.dtype(), DType::Bool);
  // A condition is part of the loop: the same loop without one is another loop.
  Kernel plain = parse_kernel(
      "kernel scale(n, m) {\n"
      "  input x : f32[n, m] strides [m, 1]\n"
      "  output y : f32[n, m] strides [m, 1]\n"
      "  for (i, 0, n) parallel {\n"
      "    for (j, 0, m) vectorized {\n"
      "      y[(j + (i * m))] = (x[(j + (i * m))] * f32(2))\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_FALSE(structurally_equal(k, plain));
}

TEST(ParseKernel, ResolvesNamesToVarsSizesAndBuffers) {
  Kernel k = parse_kernel(read_golden("layer_norm.loop"));
  ASSERT_EQ(k.buffers.size(), 6u);
  EXPECT_EQ(k.buffers[3].role, BufferRole::Output);
  EXPECT_NE(k.buffers[0].sizes[1].as<SizeVar>(), nullptr);
  const auto* loop = k.body.as<For>();
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->for_kind, ForKind::Parallel);
  EXPECT_NE(loop->extent.as<SizeVar>(), nullptr);
}

TEST(ParseKernel, RoundTripsEveryConstantAndOperatorForm) {
  std::string text =
      "kernel ops(n) {\n"
      "  inout a : f64[n] strides [1]\n"
      "  temp t : i32[4] strides [1]\n"
      "  for (i, 0, n) {\n"
      "    a[i] = select(((i % 2) == 0), cast<f64>(((i // 2) - -5)), f64(-1.5e-300))\n"
      "    t[min(i, 3)] = max(i32(-7), cast<i32>(!((i < n) || (i <= 2))))\n"
      "    a[i] = (pow(a[i], f64(inf)) / f64(nan))\n"
      "    if (i != 1) {\n"
      "    }\n"
      "  }\n"
      "}\n";
  expect_round_trip(text);
}

TEST(ParseKernel, RoundTripsEmptyKernels) {
  expect_round_trip("kernel nothing() {\n}\n");
  expect_round_trip("kernel scalar() {\n  output y : b8[] strides []\n  y[0] = true\n}\n");
}

TEST(ParseKernel, AcceptsFreeFormattingAndComments) {
  Kernel k = parse_kernel(
      "kernel k(n){ # a comment\n output y:f32[n] strides[1] for(i,0,n)serial{y[i]=f32(2)}}");
  EXPECT_EQ(print_kernel(k),
            "kernel k(n) {\n"
            "  output y : f32[n] strides [1]\n"
            "  for (i, 0, n) {\n"
            "    y[i] = f32(2)\n"
            "  }\n"
            "}\n");
}

/// The message of the UserError that parsing `text` throws.
std::string parse_error(const std::string& text) {
  try {
    parse_kernel(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ParseKernel, ReportsUnknownNamesWithTheirPosition) {
  EXPECT_EQ(parse_error("kernel k() {\n  output y : f32[4] strides [1]\n  y[q] = f32(1)\n}\n"),
            "line 3:6: unknown name 'q'");
  EXPECT_EQ(parse_error("kernel k() {\n  z[0] = f32(1)\n}\n"), "line 2:4: unknown buffer 'z'");
}

TEST(ParseKernel, ReportsSyntaxErrors) {
  EXPECT_EQ(parse_error("kernel k( {"), "line 1:11: expected size variable but found '{'");
  EXPECT_EQ(parse_error("kernel k() {\n  output y : f99[1] strides [1]\n}"),
            "line 2:14: expected a dtype but found 'f99'");
  EXPECT_EQ(parse_error("kernel k() {\n  output y : f32[1] strides [1]\n  y[(0 @ 1)] = f32(1)\n}"),
            "line 3:8: unexpected character '@'");
  EXPECT_EQ(parse_error("kernel k() {\n  output y : f32[1] strides [1]\n  y[(0 ? 1)] = f32(1)\n}"),
            "line 3:8: unexpected character '?'");
  EXPECT_EQ(parse_error("kernel k() {\n  output y : f32[1] strides [1]\n  y[0] = f32(1)\n"),
            "line 4:1: expected buffer name but found end of input");
  EXPECT_EQ(parse_error("kernel k() {\n}\nextra"),
            "line 3:1: expected end of input but found 'extra'");
}

TEST(ParseKernel, ReportsTextThatBuildsInvalidIr) {
  std::string msg =
      parse_error("kernel k() {\n  output y : f32[1] strides [1]\n  y[0] = (f32(1) + 2)\n}\n");
  EXPECT_EQ(msg, "line 3:21: invalid IR: Add of f32 and i64");
}

TEST(ParseExpr, ParsesWithAGivenScope) {
  ParseScope scope;
  scope.size_vars = {"n"};
  scope.vars = {{"i", DType::Int64}, {"t", DType::Float32}};
  scope.buffers = {{"x", DType::Float32}};
  Expr e = parse_expr("((x[(i + n)] * t) + f32(1))", scope);
  EXPECT_EQ(e.dtype(), DType::Float32);
  EXPECT_EQ(print_expr(e), "((x[(i + n)] * t) + f32(1))");
  EXPECT_THROW(parse_expr("(i + 1) extra", scope), UserError);
  EXPECT_THROW(parse_expr("i"), UserError);
}

}  // namespace
}  // namespace ember::loop
