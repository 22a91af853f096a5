#include "loop/split_loops.h"

#include <gtest/gtest.h>

#include <string>

#include "loop/parser.h"
#include "loop/printer.h"

namespace ember::loop {
namespace {

// The kernel `text` with its loops split at their selects, printed.
std::string split(const std::string& text) {
  Kernel k = parse_kernel(text);
  return print_stmt(split_loops_at_selects(k.body));
}

// A concatenation of three parts along the vectorized loop: one piece per part, each reading its
// part without a select (Res2Net's cat of its scales ran as a blend of every arm, 31x slower).
TEST(SplitLoops, AConcatenationIsOneLoopPerPart) {
  EXPECT_EQ(split("kernel k() {\n"
                  "  input a : f32[2, 4] strides [4, 1]\n"
                  "  input b : f32[2, 2] strides [2, 1]\n"
                  "  input c : f32[2, 2] strides [2, 1]\n"
                  "  output y : f32[2, 8] strides [8, 1]\n"
                  "  for (n, 0, 2) parallel {\n"
                  "    for (i, 0, 8) vectorized {\n"
                  "      y[((n * 8) + i)] = select((i < 4), a[((n * 4) + i)], "
                  "select((i < 6), b[(((n * 2) + i) - 4)], exp(c[(((n * 2) + i) - 6)])))\n"
                  "    }\n"
                  "  }\n"
                  "}\n"),
            "for (n, 0, 2) parallel {\n"
            "  for (i, 0, 4) vectorized {\n"
            "    y[((n * 8) + i)] = a[((n * 4) + i)]\n"
            "  }\n"
            "  for (i, 4, 2) vectorized {\n"
            "    y[((n * 8) + i)] = b[(((n * 2) + i) - 4)]\n"
            "  }\n"
            "  for (i, 6, 2) vectorized {\n"
            "    y[((n * 8) + i)] = exp(c[(((n * 2) + i) - 6)])\n"
            "  }\n"
            "}\n");
}

// `c <= i` and `i <= c` forms; a select over another condition stays; a change point past the
// loop's range does not split it, but its select folds in each piece; a parallel loop is never
// split.
TEST(SplitLoops, ConditionForms) {
  EXPECT_EQ(split("kernel k() {\n"
                  "  input a : f32[6] strides [1]\n"
                  "  output y : f32[6] strides [1]\n"
                  "  for (i, 0, 6) {\n"
                  "    y[i] = select((2 <= i), select((i <= 3), a[i], f32(1)), "
                  "select((a[i] < f32(0)), f32(2), select((i < 9), f32(3), f32(4))))\n"
                  "  }\n"
                  "}\n"),
            "for (i, 0, 2) {\n"
            "  y[i] = select((a[i] < f32(0)), f32(2), f32(3))\n"
            "}\n"
            "for (i, 2, 2) {\n"
            "  y[i] = a[i]\n"
            "}\n"
            "for (i, 4, 2) {\n"
            "  y[i] = f32(1)\n"
            "}\n");
  const std::string parallel =
      "kernel k() {\n"
      "  input a : f32[6] strides [1]\n"
      "  output y : f32[6] strides [1]\n"
      "  for (i, 0, 6) parallel {\n"
      "    y[i] = select((i < 3), a[i], f32(0))\n"
      "  }\n"
      "}\n";
  EXPECT_EQ(split(parallel), print_stmt(parse_kernel(parallel).body));
}

// A padding along the loop: the conjunction's comparisons split it in three, the border pieces
// store the padding value and the middle one reads the input as it is.
TEST(SplitLoops, APaddingIsThreeLoops) {
  EXPECT_EQ(split("kernel k() {\n"
                  "  input a : f32[4] strides [1]\n"
                  "  output y : f32[8] strides [1]\n"
                  "  for (i, 0, 8) vectorized {\n"
                  "    y[i] = select(((2 <= i) && (i < 6)), a[(i - 2)], f32(0))\n"
                  "  }\n"
                  "}\n"),
            "for (i, 0, 2) vectorized {\n"
            "  y[i] = f32(0)\n"
            "}\n"
            "for (i, 2, 4) vectorized {\n"
            "  y[i] = a[(i - 2)]\n"
            "}\n"
            "for (i, 6, 2) vectorized {\n"
            "  y[i] = f32(0)\n"
            "}\n");
}

}  // namespace
}  // namespace ember::loop
