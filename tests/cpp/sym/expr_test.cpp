#include "sym/expr.h"

#include <gtest/gtest.h>

#include "sym/eval.h"
#include "sym_test_util.h"

namespace ember::sym {
namespace {

using ExprCanonicalForm = SymTest;

TEST_F(ExprCanonicalForm, AdditionIsCommutative) {
  EXPECT_EQ(s0 * 2 + s1, s1 + SymExpr(2) * s0);
  EXPECT_EQ((s0 * 2 + s1).hash(), (s1 + SymExpr(2) * s0).hash());
  EXPECT_EQ(print(s1 + SymExpr(2) * s0), "s0*2 + s1");
}

TEST_F(ExprCanonicalForm, AdditionAndMultiplicationAreAssociative) {
  EXPECT_EQ((s0 + s1) + s2, s0 + (s1 + s2));
  EXPECT_EQ((s0 * s1) * s2, s0 * (s1 * s2));
  EXPECT_EQ(s2 * s1 * s0, s0 * s1 * s2);
  EXPECT_EQ(print(s2 * s0 * s1), "s0*s1*s2");
}

TEST_F(ExprCanonicalForm, ConstantsDistributeAndFold) {
  EXPECT_EQ(SymExpr(3) * (s0 + 2), s0 * 3 + 6);
  EXPECT_EQ(SymExpr(3) + 4, SymExpr(7));
  EXPECT_EQ((s0 + 1) * (s1 + 1), s0 * s1 + s0 + s1 + 1);
  EXPECT_EQ(print((s0 + 1) * (s1 - 1)), "-s0 + s0*s1 + s1 - 1");
  EXPECT_EQ(print((s0 + 1) * (s0 + 1)), "s0*2 + s0*s0 + 1");
  EXPECT_EQ(SymExpr(0) * s0, SymExpr(0));
}

TEST_F(ExprCanonicalForm, CancellingTermsGiveZero) {
  EXPECT_EQ(s0 - s0, SymExpr(0));
  EXPECT_EQ((s0 * 2 + s1) - (s1 + s0 + s0), SymExpr(0));
  EXPECT_EQ((s0 + s1) * (s0 - s1), s0 * s0 - s1 * s1);
  EXPECT_TRUE((s0 - s0).is_constant());
  EXPECT_EQ(floordiv(s0, 4) - floordiv(s0 * 2, 8), SymExpr(0));
}

TEST_F(ExprCanonicalForm, DistinctExpressionsDiffer) {
  EXPECT_NE(s0, s1);
  EXPECT_NE(s0 * 2, s0 * 3);
  EXPECT_NE(floordiv(s0, 2), mod(s0, 2));
  EXPECT_NE(min(s0, s1), max(s0, s1));
  EXPECT_NE(s0 * s0, s0 * 2);
  EXPECT_LT(compare(s0, s1), 0);
  EXPECT_GT(compare(s1, s0), 0);
}

TEST_F(ExprCanonicalForm, NamesConstantsAndSymbols) {
  EXPECT_EQ(s1.as_symbol(), 1);
  EXPECT_EQ((s1 * 2).as_symbol(), std::nullopt);
  EXPECT_EQ(SymExpr(4).as_constant(), 4);
  EXPECT_EQ(s0.as_constant(), std::nullopt);
  EXPECT_EQ(SymExpr(), SymExpr(0));
}

using ExprFloorDivRules = SymTest;

TEST_F(ExprFloorDivRules, MultiplesOfTheDivisorLeave) {
  EXPECT_EQ(floordiv(s0 * 4 + s1, 4), s0 + floordiv(s1, 4));
  EXPECT_EQ(floordiv(s0 * 8 + s1 + 12, 4), s0 * 2 + floordiv(s1, 4) + 3);
  EXPECT_EQ(print(floordiv(s0 * 4 + s1 * 3 + 1, 4)), "s0 + ((s1*3 + 1) // 4)");
}

TEST_F(ExprFloorDivRules, DivisionByOneIsIdentity) {
  EXPECT_EQ(floordiv(s0 * s1 + 3, 1), s0 * s1 + 3);
}

TEST_F(ExprFloorDivRules, NestedDivisionsMerge) {
  EXPECT_EQ(floordiv(floordiv(s0, 2), 3), floordiv(s0, 6));
  EXPECT_EQ(floordiv(floordiv(floordiv(s0 + s1, 2), 3), 5), floordiv(s0 + s1, 30));
}

TEST_F(ExprFloorDivRules, CommonFactorsDivideOut) {
  EXPECT_EQ(floordiv(s0 * 2, 4), floordiv(s0, 2));
  EXPECT_EQ(floordiv(s0 * 6 + 4, 4), floordiv(s0 * 3 + 2, 2));
  EXPECT_EQ(floordiv(s0 * 6 + 4, 4), floordiv(s0 * 3, 2) + 1);
}

TEST_F(ExprFloorDivRules, NegativeDivisorNegatesBothSides) {
  EXPECT_EQ(floordiv(s0, -2), floordiv(-s0, 2));
  EXPECT_EQ(print(floordiv(s0, -2)), "(-s0 // 2)");
}

TEST_F(ExprFloorDivRules, ConstantsFoldWithPythonSemantics) {
  EXPECT_EQ(floordiv(7, 2), SymExpr(3));
  EXPECT_EQ(floordiv(-7, 2), SymExpr(-4));
  EXPECT_EQ(floordiv(7, -2), SymExpr(-4));
  EXPECT_EQ(floordiv(-7, -2), SymExpr(3));
  EXPECT_EQ(floordiv(-8, 2), SymExpr(-4));
  EXPECT_EQ(floordiv(0, s0), SymExpr(0));
}

TEST_F(ExprFloorDivRules, SymbolicDivisorStaysAnAtom) {
  EXPECT_EQ(print(floordiv(s0 + 1, s1)), "((s0 + 1) // s1)");
}

using ExprModRules = SymTest;

TEST_F(ExprModRules, ModuloOneIsZero) {
  EXPECT_EQ(mod(s0 * s1, 1), SymExpr(0));
}

TEST_F(ExprModRules, MultiplesOfTheDivisorDrop) {
  EXPECT_EQ(mod(s0 * 4 + s1, 4), mod(s1, 4));
  EXPECT_EQ(mod(s0 * 5 + 6, 4), mod(s0 + 2, 4));
  EXPECT_EQ(mod(s0 * 8 + 12, 4), SymExpr(0));
  EXPECT_EQ(mod(-s0, 4), mod(s0 * 3, 4));
}

TEST_F(ExprModRules, ModuloOfAMultipleOfTheDivisorNests) {
  EXPECT_EQ(mod(mod(s0, 12), 4), mod(s0, 4));
  // Not the other way round: needs s0 % 4 < 12 from ranges (simplify).
  EXPECT_EQ(print(mod(mod(s0, 4), 12)), "((s0 % 4) % 12)");
}

TEST_F(ExprModRules, ConstantsFoldWithPythonSemantics) {
  EXPECT_EQ(mod(7, 3), SymExpr(1));
  EXPECT_EQ(mod(-7, 3), SymExpr(2));
  EXPECT_EQ(mod(7, -3), SymExpr(-2));
  EXPECT_EQ(mod(-7, -3), SymExpr(-1));
  EXPECT_EQ(mod(0, s0), SymExpr(0));
}

TEST_F(ExprModRules, NegativeDivisorTakesItsSign) {
  EXPECT_EQ(mod(s0, -4), -mod(-s0, 4));
  EXPECT_EQ(evaluate(mod(s0, -4), {{0, 7}}), -1);
}

using ExprMinMaxRules = SymTest;

TEST_F(ExprMinMaxRules, ResolveByConstantDifference) {
  EXPECT_EQ(min(s0, s0), s0);
  EXPECT_EQ(min(s0 + 1, s0), s0);
  EXPECT_EQ(max(s0 + 1, s0), s0 + 1);
  EXPECT_EQ(max(s0 * 2 - 3, s0 * 2 + 3), s0 * 2 + 3);
  EXPECT_EQ(min(SymExpr(3), SymExpr(-2)), SymExpr(-2));
}

TEST_F(ExprMinMaxRules, OperandsAreSorted) {
  EXPECT_EQ(max(s1, s0), max(s0, s1));
  EXPECT_EQ(print(min(s1, s0)), "min(s0, s1)");
  EXPECT_EQ(print(min(s1, s0 * s1)), "min(s0*s1, s1)");
}

using ExprEvaluate = SymTest;

TEST_F(ExprEvaluate, FollowsPythonSemanticsOnNegativeValues) {
  Bindings b{{0, -7}, {1, 2}, {2, -2}};
  EXPECT_EQ(evaluate(floordiv(s0, 2), b), -4);
  EXPECT_EQ(evaluate(mod(s0, 2), b), 1);
  EXPECT_EQ(evaluate(floordiv(s0, s2), b), 3);
  EXPECT_EQ(evaluate(mod(s0, s2), b), -1);
  EXPECT_EQ(evaluate(floordiv(s1, s2), b), -1);
  EXPECT_EQ(evaluate(mod(s1 + 5, s2), b), -1);
  EXPECT_EQ(evaluate(min(s0, s2) * max(s1, s2), b), -14);
}

TEST_F(ExprEvaluate, ReportsMissingSymbolsAndZeroDivisors) {
  EXPECT_EQ(error_of<UserError>([&] { evaluate(s0 + s1, {{0, 1}}); }), "no value for symbol s1");
  EXPECT_EQ(error_of<UserError>([&] {
              evaluate(floordiv(s0, s1), {{0, 1}, {1, 0}});
            }),
            "division by zero");
  EXPECT_EQ(error_of<UserError>([&] {
              evaluate(mod(s0, s1), {{0, 1}, {1, 0}});
            }),
            "modulo by zero");
}

TEST_F(ExprEvaluate, ZeroConstantDivisorIsAUserError) {
  EXPECT_EQ(error_of<UserError>([&] { floordiv(s0, 0); }), "division by zero");
  EXPECT_EQ(error_of<UserError>([&] { mod(s0, s1 - s1); }), "modulo by zero");
}

TEST_F(ExprEvaluate, OverflowIsUnsupported) {
  SymExpr big = SymExpr(INT64_MAX) * s0;
  EXPECT_EQ(error_of<Unsupported>([&] { big + big; }), "symbolic integer overflow");
  EXPECT_EQ(error_of<Unsupported>([&] { evaluate(big, {{0, 2}}); }), "symbolic integer overflow");
  EXPECT_EQ(error_of<Unsupported>([&] { SymExpr(INT64_MIN); }), "symbolic integer overflow");
}

}  // namespace
}  // namespace ember::sym
