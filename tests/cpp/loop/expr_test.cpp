#include "loop/expr.h"

#include <gtest/gtest.h>

#include "loop/printer.h"
#include "loop/stmt.h"
#include "support/error.h"

namespace ember::loop {
namespace {

TEST(Expr, BuildersMakeTypedNodes) {
  Expr i = var("i");
  Expr e = i * 4 + size("n");
  ASSERT_NE(e.as<Add>(), nullptr);
  EXPECT_EQ(e.dtype(), DType::Int64);
  EXPECT_EQ(e.as<Add>()->a.as<Mul>()->b.as<IntImm>()->value, 4);
  EXPECT_EQ(e.as<Mul>(), nullptr);
  EXPECT_EQ(LT::make(i, idx(3)).dtype(), DType::Bool);
  EXPECT_EQ(Cast::make(DType::Float32, i).dtype(), DType::Float32);
  EXPECT_EQ(Load::make(DType::BFloat16, "x", i).dtype(), DType::BFloat16);
  EXPECT_EQ(Call::make(CallFn::IsNan, {f32(1)}).dtype(), DType::Bool);
  EXPECT_EQ(Call::make(CallFn::Abs, {i}).dtype(), DType::Int64);
}

TEST(Expr, HandlesCompareByIdentity) {
  Expr a = var("i");
  Expr b = var("i");
  EXPECT_TRUE(a.same_as(a));
  EXPECT_FALSE(a.same_as(b));
  EXPECT_FALSE(Expr().defined());
}

TEST(Expr, MakeRejectsMixedOperandTypes) {
  EXPECT_THROW(Add::make(var("i"), f32(1)), InternalError);
  EXPECT_THROW(Select::make(bool_imm(true), f32(1), idx(1)), InternalError);
  EXPECT_THROW(Call::make(CallFn::Pow, {f32(1), f64(2)}), InternalError);
}

TEST(Expr, MakeRejectsOperandsOutsideTheCategory) {
  EXPECT_THROW(Div::make(idx(1), idx(2)), InternalError);
  EXPECT_THROW(FloorDiv::make(f32(1), f32(2)), InternalError);
  EXPECT_THROW(And::make(idx(1), idx(1)), InternalError);
  EXPECT_THROW(LT::make(bool_imm(true), bool_imm(false)), InternalError);
  EXPECT_NO_THROW(EQ::make(bool_imm(true), bool_imm(false)));
  EXPECT_THROW(Not::make(idx(1)), InternalError);
  EXPECT_THROW(Call::make(CallFn::Exp, {idx(1)}), InternalError);
  EXPECT_THROW(Call::make(CallFn::Exp, {f32(1), f32(2)}), InternalError);
}

TEST(Expr, MakeRejectsBadConstantsAndNames) {
  EXPECT_THROW(IntImm::make(DType::Int8, 200), InternalError);
  EXPECT_THROW(IntImm::make(DType::Bool, 2), InternalError);
  EXPECT_THROW(IntImm::make(DType::Float32, 2), InternalError);
  EXPECT_THROW(FloatImm::make(DType::Int32, 2), InternalError);
  EXPECT_THROW(Var::make("1x"), InternalError);
  EXPECT_THROW(Load::make(DType::Float32, "a b", idx(0)), InternalError);
  EXPECT_THROW(Load::make(DType::Float32, "x", f32(0)), InternalError);
}

TEST(Expr, InternalErrorsNameTheProblem) {
  try {
    Add::make(var("i"), f32(1));
    FAIL() << "expected a throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("Add of i64 and f32"), std::string::npos) << e.what();
  }
}

TEST(Expr, Float32ConstantsAreRoundedToFloat) {
  EXPECT_EQ(f32(0.1).as<FloatImm>()->value, static_cast<double>(0.1f));
  EXPECT_EQ(f64(0.1).as<FloatImm>()->value, 0.1);
}

TEST(Expr, FloorDivAndModFollowPython) {
  EXPECT_EQ(floordiv_i64(7, 2), 3);
  EXPECT_EQ(floordiv_i64(-7, 2), -4);
  EXPECT_EQ(floordiv_i64(7, -2), -4);
  EXPECT_EQ(mod_i64(-7, 2), 1);
  EXPECT_EQ(mod_i64(7, -2), -1);
  EXPECT_EQ(mod_i64(-8, 2), 0);
  EXPECT_EQ(floordiv_i64(INT64_MIN, -1), INT64_MIN);
}

TEST(Expr, CallTableHasNamesAndArities) {
  EXPECT_STREQ(call_fn_name(CallFn::Sigmoid), "sigmoid");
  EXPECT_EQ(parse_call_fn("rsqrt"), CallFn::Rsqrt);
  EXPECT_EQ(parse_call_fn("nope"), std::nullopt);
  EXPECT_EQ(call_fn_arity(CallFn::Atan2), 2);
}

TEST(Stmt, BlocksAreFlatAndNeverSingletons) {
  Stmt a = Store::make("y", idx(0), f32(1));
  Stmt b = Store::make("y", idx(1), f32(2));
  EXPECT_TRUE(Block::make({a}).same_as(a));
  Stmt nested = Block::make({Block::make({a, b}), Block::make({}), a});
  ASSERT_NE(nested.as<Block>(), nullptr);
  EXPECT_EQ(nested.as<Block>()->stmts.size(), 3u);
}

TEST(Stmt, MakeValidatesStatements) {
  EXPECT_THROW(
      For::make(Var::make("i", DType::Int32), idx(0), idx(4), ForKind::Serial, Block::make({})),
      InternalError);
  EXPECT_THROW(For::make(var("i"), idx(0), f32(4), ForKind::Serial, Block::make({})),
               InternalError);
  EXPECT_THROW(Let::make(var("t"), f32(1), Block::make({})), InternalError);
  EXPECT_THROW(IfThenElse::make(idx(1), Block::make({})), InternalError);
  EXPECT_THROW(Accumulate::make(ReduceOp::ArgMax, {"v"}, idx(0), {f32(1), idx(0)}), InternalError);
  EXPECT_THROW(Accumulate::make(ReduceOp::ArgMax, {"v", "k"}, idx(0), {f32(1), f32(0)}),
               InternalError);
  EXPECT_THROW(Accumulate::make(ReduceOp::Any, {"v"}, idx(0), {f32(1)}), InternalError);
  EXPECT_THROW(Accumulate::make(ReduceOp::WelfordReduce, {"m", "m2", "n"}, idx(0), {idx(1)}),
               InternalError);
}

TEST(Stmt, ReductionIdentitiesMatchTheirOps) {
  EXPECT_EQ(print_expr(reduction_identity(ReduceOp::Sum, 0, DType::Float32)), "f32(0)");
  EXPECT_EQ(print_expr(reduction_identity(ReduceOp::Prod, 0, DType::Int32)), "i32(1)");
  EXPECT_EQ(print_expr(reduction_identity(ReduceOp::Max, 0, DType::Float32)), "f32(-inf)");
  EXPECT_EQ(print_expr(reduction_identity(ReduceOp::Min, 0, DType::Int8)), "i8(127)");
  EXPECT_EQ(print_expr(reduction_identity(ReduceOp::ArgMax, 1, DType::Int64)),
            "9223372036854775807");
  EXPECT_EQ(print_expr(reduction_identity(ReduceOp::All, 0, DType::Bool)), "true");
  EXPECT_THROW(reduction_identity(ReduceOp::Sum, 1, DType::Float32), InternalError);
}

}  // namespace
}  // namespace ember::loop
