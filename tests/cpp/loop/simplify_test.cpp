#include "loop/simplify.h"

#include <gtest/gtest.h>

#include "loop/parser.h"
#include "loop/printer.h"
#include "test_util.h"

namespace ember::loop {
namespace {

/// Names the test expressions use: i in [0, 15], j in [0, 3], k unbounded (i64); size n;
/// floats t, u; b8 c; i32 w; buffer x (f32).
ParseScope scope() {
  ParseScope s;
  s.size_vars = {"n"};
  s.vars = {{"i", DType::Int64},   {"j", DType::Int64}, {"k", DType::Int64}, {"t", DType::Float32},
            {"u", DType::Float32}, {"c", DType::Bool},  {"w", DType::Int32}};
  s.buffers = {{"x", DType::Float32}};
  return s;
}

VarBounds bounds() {
  return {{"i", Interval::range(0, 15)}, {"j", Interval::range(0, 3)}};
}

/// Simplifies `text` and returns the printed result; `rule`, when given, must have fired.
std::string simp(const std::string& text, const char* rule = nullptr) {
  SimplifyStats stats;
  Expr e = simplify(parse_expr(text, scope()), bounds(), &stats);
  if (rule != nullptr) {
    EXPECT_GT(stats.rule_counts[rule], 0) << text << " did not use " << rule;
  }
  return print_expr(e);
}

// check_index(x, lo, hi) is x once the bounds prove lo <= x < hi, and bounds what follows it.
TEST(Simplify, DropsIndexChecksTheBoundsProve) {
  EXPECT_EQ(simp("check_index(i, 0, 16)", "check-index-by-bounds"), "i");
  EXPECT_EQ(simp("check_index((i + j), -4, 19)", "check-index-by-bounds"), "(i + j)");
  EXPECT_EQ(simp("check_index(i, 0, 15)"), "check_index(i, 0, 15)");
  EXPECT_EQ(simp("check_index(k, 0, 100)"), "check_index(k, 0, 100)");
  EXPECT_EQ(simp("(check_index(k, 0, 100) < 100)"), "true");
}

TEST(Simplify, FoldsIntegerConstants) {
  EXPECT_EQ(simp("((2 + 3) * 4)", "fold-constants"), "20");
  EXPECT_EQ(simp("(-7 // 2)", "fold-constants"), "-4");
  EXPECT_EQ(simp("(-7 % 2)", "fold-constants"), "1");
  EXPECT_EQ(simp("min(3, -2)", "fold-constants"), "-2");
  EXPECT_EQ(simp("max(3, -2)", "fold-constants"), "3");
  EXPECT_EQ(simp("(i32(2147483647) + i32(1))", "fold-constants"), "i32(-2147483648)");
  EXPECT_EQ(simp("((1 < 2) && !(3 == 3))", "fold-constants"), "false");
  EXPECT_EQ(simp("cast<u8>(300)", "fold-constants"), "u8(44)");
  EXPECT_EQ(simp("cast<b8>(f32(0.5))", "fold-constants"), "true");
}

TEST(Simplify, FoldsBitwiseOpsAndShiftsAsTorch) {
  EXPECT_EQ(simp("((12 & 10) | (1 ^ 3))", "fold-constants"), "10");
  EXPECT_EQ(simp("(u8(255) ^ u8(15))", "fold-constants"), "u8(240)");
  EXPECT_EQ(simp("(i8(64) << i8(1))", "fold-constants"), "i8(-128)");
  EXPECT_EQ(simp("(i8(1) << i8(8))", "fold-constants"), "i8(0)");
  EXPECT_EQ(simp("(3 << -1)", "fold-constants"), "0");
  EXPECT_EQ(simp("(i16(-9) >> i16(2))", "fold-constants"), "i16(-3)");
  EXPECT_EQ(simp("(i32(-9) >> i32(40))", "fold-constants"), "i32(-1)");
  EXPECT_EQ(simp("(u8(200) >> u8(8))", "fold-constants"), "u8(0)");
}

TEST(Simplify, LeavesDivisionByZeroAlone) {
  EXPECT_EQ(simp("(7 // 0)"), "(7 // 0)");
}

TEST(Simplify, FoldsFloatConstantsExactly) {
  EXPECT_EQ(simp("(f32(0.1) + f32(0.2))", "fold-constants"), "f32(0.3)");
  EXPECT_EQ(simp("(f64(0.1) + f64(0.2))", "fold-constants"), "f64(0.30000000000000004)");
  EXPECT_EQ(simp("(f32(1) / f32(0))", "fold-constants"), "f32(inf)");
  EXPECT_EQ(simp("max(f32(nan), f32(1))", "fold-constants"), "f32(nan)");
  EXPECT_EQ(simp("(f32(nan) == f32(nan))", "fold-constants"), "false");
  EXPECT_EQ(simp("cast<i32>(f32(-2.7))", "fold-constants"), "i32(-2)");
  // Not folded: bf16 arithmetic, min of signed zeros, out-of-range float -> int casts.
  EXPECT_EQ(simp("(bf16(1) + bf16(2))"), "(bf16(1) + bf16(2))");
  EXPECT_EQ(simp("min(f32(0), f32(-0))"), "min(f32(0), f32(-0))");
  EXPECT_EQ(simp("cast<i32>(f32(1e+20))"), "cast<i32>(f32(1e+20))");
}

TEST(Simplify, CombinesConstantTerms) {
  EXPECT_EQ(simp("((k + 2) + 3)", "linear-canonical"), "(k + 5)");
  EXPECT_EQ(simp("((k - 2) - 3)", "linear-canonical"), "(k - 5)");
  EXPECT_EQ(simp("((2 + k) - 2)", "linear-canonical"), "k");
}

TEST(Simplify, AppliesAdditiveAndMultiplicativeIdentities) {
  EXPECT_EQ(simp("(k + 0)", "linear-canonical"), "k");
  EXPECT_EQ(simp("(k * 1)", "linear-canonical"), "k");
  EXPECT_EQ(simp("(k * 0)", "linear-canonical"), "0");
  EXPECT_EQ(simp("(k - k)", "linear-canonical"), "0");
  EXPECT_EQ(simp("(w + i32(0))", "int-identities"), "w");
  EXPECT_EQ(simp("(i32(1) * w)", "int-identities"), "w");
  EXPECT_EQ(simp("(w * i32(0))", "int-identities"), "i32(0)");
  EXPECT_EQ(simp("(w - w)", "int-identities"), "i32(0)");
}

TEST(Simplify, OrdersIndexTermsCanonically) {
  EXPECT_EQ(simp("((j + (i * 4)) + n)", "linear-canonical"), "(((i * 4) + j) + n)");
  EXPECT_EQ(simp("((x[k] < t) == (k < (n + (j + 1))))"), "((k < ((j + n) + 1)) == (x[k] < t))");
}

TEST(Simplify, DistributesConstantFactorsAndMergesLikeTerms) {
  EXPECT_EQ(simp("(((k + 1) * 3) - (k * 2))", "linear-canonical"), "(k + 3)");
  EXPECT_EQ(simp("((k * 2) + (k * -2))", "linear-canonical"), "0");
  EXPECT_EQ(simp("(3 - k)", nullptr), "(3 - k)");
  EXPECT_EQ(simp("(0 - k)", "linear-canonical"), "(k * -1)");
}

TEST(Simplify, RecombinesFloorDivAndModOfTheSameDividend) {
  EXPECT_EQ(simp("((((k + n) // 8) * 8) + ((k + n) % 8))", "linear-canonical"), "(k + n)");
  EXPECT_EQ(simp("((((k // 8) * 16) + ((k % 8) * 2)) + 1)", "linear-canonical"), "((k * 2) + 1)");
  EXPECT_EQ(simp("(((k // 8) * 4) + (k % 8))"), "((k % 8) + ((k // 8) * 4))");
  // Digits of a row index read back at their strides: (k // 56) // 56 is k // 3136.
  EXPECT_EQ(simp("(((((k // 56) % 56) * 3584) + ((k % 56) * 64)) + ((k // 3136) * 200704))",
                 "linear-canonical"),
            "(k * 64)");
  EXPECT_EQ(simp("((((k // 4) % 8) * 2) + ((k // 32) * 16))", "linear-canonical"),
            "((k // 4) * 2)");
  // The same digits of a row n * 392 + k (a partial of a split sum), after the multiple of 56
  // was taken out of the inner quotient and remainder: (n * 392 + k) // 56 is n * 7 + k // 56.
  EXPECT_EQ(simp("((((((n * 392) + k) // 3136) * 802816) + ((((n * 7) + (k // 56)) % 56) * "
                 "14336)) + ((k % 56) * 256))"),
            "((k * 256) + (n * 100352))");
  // Or the bounds dropped the row's part of the inner quotient: ((n * 16 + i) // 16) % 16 is
  // n % 16 for 0 <= i < 16.
  EXPECT_EQ(simp("((((((n * 16) + i) // 256) * 2048) + ((n % 16) * 128)) + (i * 8))"),
            "((i * 8) + (n * 128))");
  EXPECT_EQ(simp("((((k // 4) % 8) * 2) + ((k // 32) * 8))"),
            "((((k // 4) % 8) * 2) + ((k // 32) * 8))");
}

TEST(Simplify, SortsOperandsOfCommutativeIntegerNodes) {
  EXPECT_EQ(simp("(n * k)", "sort-commutative"), "(k * n)");
  EXPECT_EQ(simp("min(n, k)", "sort-commutative"), "min(k, n)");
  EXPECT_EQ(simp("(n == k)", "sort-commutative"), "(k == n)");
}

TEST(Simplify, MovesConstantsRightWithoutReorderingFloats) {
  EXPECT_EQ(simp("(f32(2) * t)", "commute-constant-right"), "(t * f32(2))");
  EXPECT_EQ(simp("(u + t)"), "(u + t)");
  EXPECT_EQ(simp("(true && c)", "commute-constant-right"), "c");
}

TEST(Simplify, KeepsFloatIdentitiesThatAreNotExact) {
  EXPECT_EQ(simp("(t * f32(1))", "float-identities"), "t");
  EXPECT_EQ(simp("(t / f32(1))", "float-identities"), "t");
  EXPECT_EQ(simp("(t - f32(0))", "float-identities"), "t");
  EXPECT_EQ(simp("(t + f32(0))"), "(t + f32(0))");    // -0 + 0 is +0
  EXPECT_EQ(simp("(t * f32(0))"), "(t * f32(0))");    // nan * 0 is nan
  EXPECT_EQ(simp("(t - f32(-0))"), "(t - f32(-0))");  // -0 - -0 is +0
  EXPECT_EQ(simp("((t + u) + f32(1))"), "((t + u) + f32(1))");
}

TEST(Simplify, DropsDivisionAndModuloByOne) {
  EXPECT_EQ(simp("(w // i32(1))", "div-mod-by-one"), "w");
  EXPECT_EQ(simp("(w % i32(1))", "div-mod-by-one"), "i32(0)");
}

TEST(Simplify, SplitsFloorDivUsingLoopBounds) {
  EXPECT_EQ(simp("(((i * 4) + j) // 4)", "div-mod-linear"), "i");
  EXPECT_EQ(simp("((((i * 4) + j) + 8) // 4)", "div-mod-linear"), "(i + 2)");
  EXPECT_EQ(simp("(((k * 8) + i) // 4)", "div-mod-linear"), "((k * 2) + (i // 4))");
  EXPECT_EQ(simp("(j // 4)", "div-mod-linear"), "0");
  // k is unbounded: nothing to pull out.
  EXPECT_EQ(simp("((k + 1) // 4)"), "((k + 1) // 4)");
}

TEST(Simplify, SplitsModUsingLoopBounds) {
  EXPECT_EQ(simp("(((i * 4) + j) % 4)", "div-mod-linear"), "j");
  EXPECT_EQ(simp("(((k * 8) + j) % 4)", "div-mod-linear"), "j");
  EXPECT_EQ(simp("((k + 6) % 4)", "div-mod-linear"), "((k + 2) % 4)");
  EXPECT_EQ(simp("((j + 4) % 4)", "div-mod-linear"), "j");
  EXPECT_EQ(simp("(k % 4)"), "(k % 4)");
}

TEST(Simplify, CollapsesNestedDivisionAndModulo) {
  EXPECT_EQ(simp("((k // 4) // 8)", "div-mod-nested"), "(k // 32)");
  EXPECT_EQ(simp("((k % 8) % 4)", "div-mod-nested"), "(k % 4)");
  EXPECT_EQ(simp("((k % 6) % 4)"), "((k % 6) % 4)");
}

TEST(Simplify, ResolvesMinAndMax) {
  EXPECT_EQ(simp("min(t, t)", "min-max-self"), "t");
  EXPECT_EQ(simp("min(j, 7)", "min-max-by-bounds"), "j");
  EXPECT_EQ(simp("max(i, 15)", "min-max-by-bounds"), "15");
  EXPECT_EQ(simp("max(i, 5)"), "max(i, 5)");
  EXPECT_EQ(simp("max(n, 0)", "min-max-by-bounds"), "n");
}

TEST(Simplify, DecidesComparisonsFromBounds) {
  EXPECT_EQ(simp("(j < 4)", "compare-by-bounds"), "true");
  EXPECT_EQ(simp("(i <= -1)", "compare-by-bounds"), "false");
  EXPECT_EQ(simp("((k + 3) < (k + 5))", "compare-by-bounds"), "true");
  EXPECT_EQ(simp("(k == k)", "compare-by-bounds"), "true");
  EXPECT_EQ(simp("(n != -1)", "compare-by-bounds"), "true");
  EXPECT_EQ(simp("(i < 8)"), "(i < 8)");
  EXPECT_EQ(simp("(t == t)"), "(t == t)");  // false for nan
}

TEST(Simplify, AppliesLogicalIdentities) {
  EXPECT_EQ(simp("(c && true)", "logical-identities"), "c");
  EXPECT_EQ(simp("(c && false)", "logical-identities"), "false");
  EXPECT_EQ(simp("(c || false)", "logical-identities"), "c");
  EXPECT_EQ(simp("(c || true)", "logical-identities"), "true");
  EXPECT_EQ(simp("(c || c)", "logical-identities"), "c");
}

TEST(Simplify, PushesNotIntoComparisons) {
  EXPECT_EQ(simp("!!c", "not-rules"), "c");
  EXPECT_EQ(simp("!(k < n)", "not-rules"), "(n <= k)");
  EXPECT_EQ(simp("!(t == u)", "not-rules"), "(t != u)");
  EXPECT_EQ(simp("!(t < u)"), "!(t < u)");  // not (u <= t) when either is nan
}

TEST(Simplify, ResolvesSelects) {
  EXPECT_EQ(simp("select((j < 4), t, u)", "select-rules"), "t");
  EXPECT_EQ(simp("select(c, t, t)", "select-rules"), "t");
  EXPECT_EQ(simp("select(!c, t, u)", "select-rules"), "select(c, u, t)");
}

TEST(Simplify, DropsCastsToTheSameType) {
  EXPECT_EQ(simp("cast<f32>(t)", "cast-same-type"), "t");
  EXPECT_EQ(simp("cast<f64>(t)"), "cast<f64>(t)");
}

TEST(Simplify, SimplifiesInsideLoadsAndCalls) {
  EXPECT_EQ(simp("exp(x[((((i * 4) + j) // 4) + 0)])"), "exp(x[i])");
}

TEST(Simplify, IsIdempotent) {
  for (const char* text : {"((j + (i * 4)) + n)", "(((k * 8) + i) // 4)", "(0 - k)",
                           "((k + 6) % 4)", "(f32(2) * t)"}) {
    std::string once = simp(text);
    EXPECT_EQ(simp(once), once) << text;
  }
}

TEST(SimplifyStmt, UsesLoopExtentsAsBounds) {
  Kernel k = parse_kernel(
      "kernel k(n) {\n"
      "  input x : f32[n, 4] strides [4, 1]\n"
      "  output y : f32[n, 4] strides [4, 1]\n"
      "  for (i, 0, n) {\n"
      "    for (j, 0, 4) vectorized {\n"
      "      let q = (((i * 4) + j) // 4) {\n"
      "        y[(((((i * 4) + j) // 4) * 4) + (((i * 4) + j) % 4))] = x[((q * 4) + (j % 4))]\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_EQ(print_kernel(simplify(k)),
            "kernel k(n) {\n"
            "  input x : f32[n, 4] strides [4, 1]\n"
            "  output y : f32[n, 4] strides [4, 1]\n"
            "  for (i, 0, n) {\n"
            "    for (j, 0, 4) vectorized {\n"
            "      let q = i {\n"
            "        y[((i * 4) + j)] = x[(j + (q * 4))]\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(SimplifyStmt, RemovesEmptyLoopsAndConstantBranches) {
  Kernel k = parse_kernel(
      "kernel k() {\n"
      "  output y : f32[4] strides [1]\n"
      "  for (i, 0, 4) {\n"
      "    for (r, 0, (2 - 2)) {\n"
      "      y[r] = f32(0)\n"
      "    }\n"
      "    if (i < 4) {\n"
      "      y[i] = f32(1)\n"
      "    } else {\n"
      "      y[i] = f32(2)\n"
      "    }\n"
      "    if (9 < i) {\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_EQ(print_kernel(simplify(k)),
            "kernel k() {\n"
            "  output y : f32[4] strides [1]\n"
            "  for (i, 0, 4) {\n"
            "    y[i] = f32(1)\n"
            "  }\n"
            "}\n");
}

}  // namespace
}  // namespace ember::loop

namespace ember::loop {
namespace {

TEST(SimplifyStmt, DecidesGuardsAgainstSymbolicLoopExtents) {
  Kernel k = parse_kernel(
      "kernel k(n, m) {\n"
      "  output y : f32[n] strides [1]\n"
      "  for (i, 1, n) {\n"
      "    if (((i < (n + 1)) && (0 < i)) && (i < m)) {\n"
      "      y[(i - 1)] = select(((n + 1) <= i), f32(1), f32(2))\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_EQ(print_kernel(simplify(k)),
            "kernel k(n, m) {\n"
            "  output y : f32[n] strides [1]\n"
            "  for (i, 1, n) {\n"
            "    if (i < m) {\n"
            "      y[(i - 1)] = f32(2)\n"
            "    }\n"
            "  }\n"
            "}\n");
}

// The strides of an access: the coefficients of an affine index (digits recombined included);
// nullopt for one that is not affine, or reads a load or another variable.
TEST(AffineCoefficients, OfAnIndex) {
  auto coef = [](const std::string& text) {
    return affine_coefficients(parse_expr(text, scope()), {"i", "j"});
  };
  EXPECT_EQ(coef("(((i * 96) + j) + 7)"), (std::vector<int64_t>{96, 1}));
  EXPECT_EQ(coef("((((i // 4) * 8) + ((i % 4) * 2)) + (j * 3))"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(coef("(i - j)"), (std::vector<int64_t>{1, -1}));
  EXPECT_FALSE(coef("((i % 2) + j)").has_value());
  EXPECT_FALSE(coef("(i + k)").has_value());
  EXPECT_FALSE(coef("(i * n)").has_value());
}

}  // namespace
}  // namespace ember::loop
