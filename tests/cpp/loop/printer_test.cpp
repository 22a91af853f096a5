#include "loop/printer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ember::loop {
namespace {

/// out[i] = relu(x[i * 2]) for i in [0, n), with a bounds guard, built by hand.
Kernel build_relu() {
  Kernel k;
  k.name = "relu_strided";
  k.size_vars = {"n"};
  k.buffers = {{"x", BufferRole::Input, DType::Float32, {size("n")}, {idx(2)}},
               {"out", BufferRole::Output, DType::Float32, {size("n")}, {idx(1)}}};
  Expr i = var("i");
  Expr load = Load::make(DType::Float32, "x", i * 2);
  Stmt store = Store::make("out", i, max(load, f32(0)));
  Stmt guarded =
      IfThenElse::make(LT::make(i, size("n")), store, Store::make("out", i, f32(std::nan(""))));
  k.body = For::make(i, idx(0), size("n"), ForKind::Vectorized, guarded);
  return k;
}

TEST(PrintKernel, WritesTheDocumentedFormat) {
  EXPECT_EQ(print_kernel(build_relu()),
            "kernel relu_strided(n) {\n"
            "  input x : f32[n] strides [2]\n"
            "  output out : f32[n] strides [1]\n"
            "  for (i, 0, n) vectorized {\n"
            "    if (i < n) {\n"
            "      out[i] = max(x[(i * 2)], f32(0))\n"
            "    } else {\n"
            "      out[i] = f32(nan)\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(PrintExpr, WritesConstantsWithTheirTypes) {
  EXPECT_EQ(print_expr(idx(-3)), "-3");
  EXPECT_EQ(print_expr(bool_imm(true)), "true");
  EXPECT_EQ(print_expr(IntImm::make(DType::Int32, 7)), "i32(7)");
  EXPECT_EQ(print_expr(IntImm::make(DType::UInt8, 255)), "u8(255)");
  EXPECT_EQ(print_expr(f32(0.1)), "f32(0.1)");
  EXPECT_EQ(print_expr(f64(0.1)), "f64(0.1)");
  EXPECT_EQ(print_expr(f64(1e-5)), "f64(1e-05)");
  EXPECT_EQ(print_expr(f32(-std::numeric_limits<double>::infinity())), "f32(-inf)");
  EXPECT_EQ(print_expr(f32(-0.0)), "f32(-0)");
  EXPECT_EQ(print_expr(FloatImm::make(DType::BFloat16, 1.5)), "bf16(1.5)");
}

TEST(PrintExpr, WritesEveryOperatorForm) {
  Expr i = var("i"), n = size("n");
  Expr x = Load::make(DType::Float32, "x", i);
  EXPECT_EQ(print_expr(floordiv(i, idx(4)) + mod(i, idx(4)) - n), "(((i // 4) + (i % 4)) - n)");
  EXPECT_EQ(print_expr(Div::make(x, f32(2))), "(x[i] / f32(2))");
  EXPECT_EQ(print_expr(min(i, n)), "min(i, n)");
  EXPECT_EQ(print_expr(And::make(LE::make(i, n), Not::make(EQ::make(i, idx(0))))),
            "((i <= n) && !(i == 0))");
  EXPECT_EQ(print_expr(Or::make(NE::make(i, n), bool_imm(false))), "((i != n) || false)");
  EXPECT_EQ(print_expr(Select::make(LT::make(i, n), x, f32(0))), "select((i < n), x[i], f32(0))");
  EXPECT_EQ(print_expr(Cast::make(DType::Float64, i)), "cast<f64>(i)");
  EXPECT_EQ(print_expr(Call::make(CallFn::Pow, {x, f32(2)})), "pow(x[i], f32(2))");
}

TEST(PrintStmt, WritesReductionsLetsAndAllocations) {
  Expr r = var("r");
  Expr x = Load::make(DType::Float32, "x", r);
  Stmt body = Block::make({Accumulate::make(ReduceOp::Sum, {"acc"}, idx(0), {x}),
                           Accumulate::make(ReduceOp::ArgMin, {"v", "k"}, idx(0), {x, r}),
                           Let::make(Var::make("t", DType::Float32), x,
                                     Store::make("acc", idx(0), Var::make("t", DType::Float32)))});
  Stmt s = Allocate::make("acc", DType::Float32, {idx(1)},
                          For::make(r, idx(0), idx(8), ForKind::Unrolled, body));
  EXPECT_EQ(print_stmt(s),
            "alloc acc : f32[1] {\n"
            "  for (r, 0, 8) unrolled {\n"
            "    accumulate sum acc[0] <- x[r]\n"
            "    accumulate argmin (v, k)[0] <- (x[r], r)\n"
            "    let t = x[r] {\n"
            "      acc[0] = t\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(PrintStmt, ShowsUndefinedPartsInsteadOfCrashing) {
  EXPECT_EQ(print_expr(Expr()), "<undefined>");
  Kernel k;
  k.name = "empty";
  EXPECT_EQ(print_kernel(k), "kernel empty() {\n  <undefined>\n}\n");
}

}  // namespace
}  // namespace ember::loop
