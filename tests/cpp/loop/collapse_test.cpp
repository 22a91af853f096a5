#include "loop/collapse.h"

#include <gtest/gtest.h>

#include <string>

#include "loop/parser.h"
#include "loop/printer.h"

namespace ember::loop {
namespace {

// The kernel `text` with its body collapsed, printed.
std::string collapsed(const std::string& text) {
  Kernel k = parse_kernel(text);
  return print_stmt(collapse_loops(k.body));
}

// A contiguous NHWC kernel: four loops that every index walks as one run become one.
TEST(CollapseLoops, AContiguousNestIsOneLoop) {
  EXPECT_EQ(collapsed("kernel k() {\n"
                      "  input x : f32[2, 3, 4, 8] strides [96, 32, 8, 1]\n"
                      "  output y : f32[2, 3, 4, 8] strides [96, 32, 8, 1]\n"
                      "  for (n, 0, 2) parallel {\n"
                      "    for (h, 0, 3) {\n"
                      "      for (w, 0, 4) {\n"
                      "        for (c, 0, 8) vectorized {\n"
                      "          y[((((n * 96) + (h * 32)) + (w * 8)) + c)] = "
                      "exp(x[((((n * 96) + (h * 32)) + (w * 8)) + c)])\n"
                      "        }\n"
                      "      }\n"
                      "    }\n"
                      "  }\n"
                      "}\n"),
            "for (n, 0, 192) vectorized {\n"
            "  y[n] = exp(x[n])\n"
            "}\n");
}

// A per-channel operand costs one remainder, which the merge pays for (the flattened nest no
// longer recovers the inner variable): channels-last batch norm's parameters.
TEST(CollapseLoops, APerChannelOperandReadsTheRemainder) {
  EXPECT_EQ(collapsed("kernel k() {\n"
                      "  input x : f32[2, 16, 8] strides [128, 8, 1]\n"
                      "  input s : f32[8] strides [1]\n"
                      "  output y : f32[2, 16, 8] strides [128, 8, 1]\n"
                      "  for (n, 0, 2) {\n"
                      "    for (p, 0, 16) {\n"
                      "      for (c, 0, 8) vectorized {\n"
                      "        y[(((n * 128) + (p * 8)) + c)] = "
                      "(x[(((n * 128) + (p * 8)) + c)] * s[c])\n"
                      "      }\n"
                      "    }\n"
                      "  }\n"
                      "}\n"),
            "for (n, 0, 256) vectorized {\n"
            "  y[n] = (x[n] * s[(n % 8)])\n"
            "}\n");
}

// A transposing read needs both the quotient and the remainder: those loops stay; the
// pair of h and w merges, and n stays (x walks h and n apart).
TEST(CollapseLoops, ATransposingReadKeepsItsLoops) {
  EXPECT_EQ(collapsed("kernel k() {\n"
                      "  input x : f32[2, 8, 3, 4] strides [96, 12, 4, 1]\n"
                      "  output y : f32[2, 3, 4, 8] strides [96, 32, 8, 1]\n"
                      "  for (n, 0, 2) {\n"
                      "    for (h, 0, 3) {\n"
                      "      for (w, 0, 4) {\n"
                      "        for (c, 0, 8) vectorized {\n"
                      "          y[((((n * 96) + (h * 32)) + (w * 8)) + c)] = "
                      "x[((((n * 96) + (c * 12)) + (h * 4)) + w)]\n"
                      "        }\n"
                      "      }\n"
                      "    }\n"
                      "  }\n"
                      "}\n"),
            "for (n, 0, 2) {\n"
            "  for (h, 0, 12) {\n"
            "    for (c, 0, 8) vectorized {\n"
            "      y[((c + (h * 8)) + (n * 96))] = x[(((c * 12) + h) + (n * 96))]\n"
            "    }\n"
            "  }\n"
            "}\n");
}

// A nest with a loop inside its body (a reduction) is left alone, as is a symbolic extent.
TEST(CollapseLoops, LeavesReductionsAndSymbolicExtents) {
  Kernel red = parse_kernel(
      "kernel k() {\n"
      "  input x : f32[4, 8] strides [8, 1]\n"
      "  output y : f32[4] strides [1]\n"
      "  for (i, 0, 4) {\n"
      "    y[i] = f32(0)\n"
      "    for (j, 0, 8) {\n"
      "      accumulate sum y[i] <- x[((i * 8) + j)]\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_TRUE(collapse_loops(red.body).same_as(red.body));
  Kernel sym = parse_kernel(
      "kernel k(m) {\n"
      "  input x : f32[m, 8] strides [8, 1]\n"
      "  output y : f32[m, 8] strides [8, 1]\n"
      "  for (i, 0, m) {\n"
      "    for (j, 0, 8) {\n"
      "      y[((i * 8) + j)] = x[((i * 8) + j)]\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_TRUE(collapse_loops(sym.body).same_as(sym.body));
}

// The sum over a group of 4 channels of a channels-last tensor, every pixel: the serial pixel
// loop and the 4-lane vector loop are one vector loop of 24 (collapse_reduction_nests).
constexpr const char* kGroupSum =
    "kernel k() {\n"
    "  input x : f32[2, 8, 2, 3] strides [48, 1, 24, 8]\n"
    "  output y : f32[4] strides [1]\n"
    "  for (p, 0, 4) parallel {\n"
    "    y[p] = f32(0)\n"
    "    for (m, 0, 6) {\n"
    "      for (c, 0, 4) vectorized {\n"
    "        accumulate sum y[p] <- x[((((p // 2) * 48) + ((p % 2) * 4)) + (c + (m * 8)))]\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n";

TEST(CollapseReductionNests, AShortVectorLoopMergesWithTheSerialLoopAroundIt) {
  Kernel k = parse_kernel(kGroupSum);
  const std::string out = print_stmt(collapse_reduction_nests(k.body, 128));
  EXPECT_NE(out.find("for (m, 0, 24) vectorized {"), std::string::npos) << out;
  EXPECT_EQ(out.find("for (c,"), std::string::npos) << out;
  EXPECT_NE(out.find("(m % 4)"), std::string::npos) << out;
  EXPECT_NE(out.find("((m // 4) * 8)"), std::string::npos) << out;
  // Past max_inner the loops stay.
  EXPECT_TRUE(collapse_reduction_nests(k.body, 2).same_as(k.body));
}

TEST(CollapseReductionNests, LeavesColumnReductionsAndPointwiseNests) {
  // A column sum: the accumulator is indexed by the vector loop's variable.
  Kernel col = parse_kernel(
      "kernel k() {\n"
      "  input x : f32[6, 4] strides [4, 1]\n"
      "  output y : f32[4] strides [1]\n"
      "  for (m, 0, 6) {\n"
      "    for (c, 0, 4) vectorized {\n"
      "      accumulate sum y[c] <- x[((m * 4) + c)]\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_TRUE(collapse_reduction_nests(col.body, 128).same_as(col.body));
  Kernel pw = parse_kernel(
      "kernel k() {\n"
      "  input x : f32[6, 4] strides [1, 6]\n"
      "  output y : f32[6, 4] strides [4, 1]\n"
      "  for (m, 0, 6) {\n"
      "    for (c, 0, 4) vectorized {\n"
      "      y[((m * 4) + c)] = x[(m + (c * 6))]\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_TRUE(collapse_reduction_nests(pw.body, 128).same_as(pw.body));
}

}  // namespace
}  // namespace ember::loop
