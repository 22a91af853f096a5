#include "sym/range.h"

#include <gtest/gtest.h>

#include "sym/eval.h"
#include "sym/guard.h"
#include "sym/query.h"
#include "sym/simplify.h"
#include "sym_test_util.h"

namespace ember::sym {
namespace {

TEST(ShapeEnvSizes, SpecializesZeroAndOne) {
  ShapeEnv env;
  EXPECT_EQ(env.create_size(0, "L['x'].size()[0]"), SymExpr(0));
  EXPECT_EQ(env.create_size(1, "L['x'].size()[1]"), SymExpr(1));
  SymExpr s = env.create_size(8, "L['x'].size()[2]");
  ASSERT_EQ(s.as_symbol(), 0);
  const SymbolInfo& info = env.info(0);
  EXPECT_EQ(info.name, "s0");
  EXPECT_EQ(info.range, Range::at_least(2));
  EXPECT_EQ(info.hint, 8);
  EXPECT_EQ(info.source, "L['x'].size()[2]");
  EXPECT_EQ(env.symbols().size(), 1u);
  EXPECT_EQ(env.find("s0"), &info);
  EXPECT_EQ(env.find("s1"), nullptr);
}

TEST(ShapeEnvSizes, WithoutSpecializationSizesAreNonnegative) {
  ShapeEnv env(/*specialize_zero_one=*/false);
  SymExpr s = env.create_size(1, "L['x'].size()[0]");
  EXPECT_EQ(s.as_symbol(), 0);
  EXPECT_EQ(env.range(0), Range::at_least(0));
}

TEST(ShapeEnvSizes, RejectsHintsOutsideTheRange) {
  ShapeEnv env;
  EXPECT_EQ(error_of<UserError>([&] { env.create_symbol(1, "n", Range::at_least(2)); }),
            "the hint 1 of n is outside its range [2, inf]");
  EXPECT_EQ(error_of<UserError>([&] { env.create_size(-1, "n"); }), "the size n is negative: -1");
  EXPECT_EQ(error_of<UserError>([&] { env.info(3); }), "unknown symbol id 3");
}

TEST(ShapeEnvSizes, ConstrainNarrowsAndKeepsTheHint) {
  ShapeEnv env;
  env.create_size(5, "n");
  env.constrain(0, {0, 64});
  EXPECT_EQ(env.range(0), (Range{2, 64}));
  EXPECT_EQ(error_of<UserError>([&] {
              env.constrain(0, {6, 10});
            }),
            "constraining s0 (n, hint 5) from [2, 64] to [6, 10] excludes the hint");
  EXPECT_EQ(error_of<UserError>([&] {
              env.constrain(0, {100, 200});
            }),
            "constraining s0 (n, hint 5) from [2, 64] to [100, 200] leaves no value");
}

TEST(RangeArithmetic, FollowsPythonSemantics) {
  EXPECT_EQ(floordiv(Range{-7, 7}, Range::constant(2)), (Range{-4, 3}));
  EXPECT_EQ(floordiv(Range{-7, 7}, Range::constant(-2)), (Range{-4, 3}));
  EXPECT_EQ(floordiv(Range{-7, 7}, Range{1, 3}), (Range{-7, 7}));
  EXPECT_EQ(floordiv(Range{-7, -1}, Range::at_least(2)), (Range{-4, -1}));
  EXPECT_EQ(floordiv(Range{3, 7}, Range{-1, 1}), Range::all());
  EXPECT_EQ(mod(Range{-7, 7}, Range::constant(3)), (Range{0, 2}));
  EXPECT_EQ(mod(Range{12, 14}, Range::constant(10)), (Range{2, 4}));
  EXPECT_EQ(mod(Range{2, 5}, Range::at_least(8)), (Range{2, 5}));
  EXPECT_EQ(mod(Range{0, 100}, Range::constant(-8)), (Range{-7, 0}));
  EXPECT_EQ(mod(Range::at_least(0), Range{1, 4}), (Range{0, 3}));
}

TEST(RangeArithmetic, InfinitiesAbsorbAndSaturate) {
  Range pos = Range::at_least(2);
  EXPECT_EQ(pos + pos, Range::at_least(4));
  EXPECT_EQ(-pos, (Range{Range::kNegInf, -2}));
  EXPECT_EQ(pos * Range::constant(0), Range::constant(0));
  EXPECT_EQ(pos * (Range{-1, 2}), Range::all());
  EXPECT_EQ(Range::constant(INT64_MAX / 2) * Range::constant(3), Range::at_least(Range::kPosInf));
  EXPECT_EQ(pow(Range{-3, 2}, 2), (Range{0, 9}));
  EXPECT_EQ(pos.str(), "[2, inf]");
  EXPECT_EQ(Range::all().str(), "[-inf, inf]");
}

using RangeOf = SymTest;

TEST_F(RangeOf, UsesTheSymbolRanges) {
  env.constrain(0, {2, 10});
  env.constrain(1, {2, 10});
  EXPECT_EQ(range_of(s0 + s1, env), (Range{4, 20}));
  EXPECT_EQ(range_of(s0 - s1, env), (Range{-8, 8}));
  EXPECT_EQ(range_of(s0 * -3, env), (Range{-30, -6}));
  EXPECT_EQ(range_of(floordiv(s0, 4), env), (Range{0, 2}));
  EXPECT_EQ(range_of(mod(s2, 8), env), (Range{0, 7}));
  EXPECT_EQ(range_of(floordiv(s2, 8), env), Range::at_least(0));
  EXPECT_EQ(range_of(min(s0, s2), env), (Range{0, 10}));
  EXPECT_EQ(range_of(max(s0, s2), env), Range::at_least(2));
  EXPECT_EQ(range_of(s0 * s0 - 1, env), (Range{3, 99}));
}

TEST_F(RangeOf, ReportsUnknownSymbols) {
  SymExpr stray = SymExpr::symbol(9, "s9");
  EXPECT_EQ(error_of<UserError>([&] { range_of(stray + 1, env); }), "unknown symbol id 9");
}

using StaticallyKnown = SymTest;

TEST_F(StaticallyKnown, ComparesByTheRangeOfTheDifference) {
  env.constrain(0, {2, Range::kPosInf});
  env.constrain(1, {2, Range::kPosInf});
  EXPECT_TRUE(statically_known_true(s0, Rel::GE, 2, env));
  EXPECT_TRUE(statically_known_true(s0 + s1, Rel::GT, s0, env));
  EXPECT_TRUE(statically_known_true(s0, Rel::LT, s0 + 1, env));
  EXPECT_TRUE(statically_known_true(s0, Rel::LE, s0, env));
  EXPECT_TRUE(statically_known_true(s0 * 2 + s1, Rel::EQ, s1 + s0 + s0, env));
  EXPECT_TRUE(statically_known_true(s0 * 2, Rel::NE, 1, env));
  EXPECT_TRUE(statically_known_true(min(s0, s1), Rel::LE, s0, env));
  EXPECT_TRUE(statically_known_true(max(s0, s1), Rel::GE, s1, env));
  // s0*s1 - s0*2 = s0 * (s1 - 2): its positive content s0 divided out, s1 - 2 >= 0.
  EXPECT_TRUE(statically_known_true(s0 * s1, Rel::GE, s0 * 2, env));
  // The guards a view's strides asked for (Falcon, batch s0 and length s1).
  EXPECT_TRUE(statically_known_true(s1 * 64, Rel::LT, s0 * s1 * 64, env));
  EXPECT_TRUE(statically_known_true(s1, Rel::LT, s0 * s1 * s1 * 2, env));
  EXPECT_TRUE(statically_known_true(s1 * 16, Rel::NE, s0 * s1 * 32, env));
  EXPECT_FALSE(statically_known_true(s1 * 4, Rel::LT, s0 * s1 * 2, env));  // s0 = 2: equal
}

TEST_F(StaticallyKnown, DividesOnlyByPositiveContent) {
  // s2 may be 0: s2*s0 - s2 = s2 * (s0 - 1) is 0 at s2 = 0, so not > 0.
  env.constrain(0, {2, Range::kPosInf});
  EXPECT_FALSE(statically_known_true(s2 * s0, Rel::GT, s2, env));
}

TEST_F(StaticallyKnown, AnswersFalseWhenItDependsOnTheValues) {
  EXPECT_FALSE(statically_known_true(s0, Rel::GT, 2, env));
  EXPECT_FALSE(statically_known_true(s0, Rel::EQ, s1, env));
  EXPECT_FALSE(statically_known_true(s0, Rel::NE, s1, env));
  EXPECT_FALSE(statically_known_true(s0, Rel::LT, s1, env));
  EXPECT_FALSE(statically_known_true(s0, Rel::GE, s1, env));
  EXPECT_FALSE(statically_known_true(s0, Rel::GT, s0, env));
  EXPECT_FALSE(statically_known_true(s0, Rel::NE, s0, env));
  // s2 may be 0 here (its range is [0, inf)).
  EXPECT_FALSE(statically_known_true(s2, Rel::NE, 0, env));
  EXPECT_FALSE(statically_known_true(floordiv(s0, 2), Rel::GE, 1, env));
}

TEST_F(StaticallyKnown, Divisibility) {
  EXPECT_TRUE(statically_known_multiple_of(s0 * 4, 4, env));
  EXPECT_TRUE(statically_known_multiple_of(s0 * 4 + 2, 2, env));
  EXPECT_TRUE(statically_known_multiple_of(s0 * s1 * 6 + s2 * 3, 3, env));
  EXPECT_TRUE(statically_known_multiple_of(s0 * 6, -3, env));
  EXPECT_TRUE(statically_known_multiple_of(0, 5, env));
  EXPECT_FALSE(statically_known_multiple_of(s0 * 4 + 2, 4, env));
  EXPECT_FALSE(statically_known_multiple_of(s0, 2, env));
  EXPECT_FALSE(statically_known_multiple_of(floordiv(s0 * 4, 3), 4, env));
  SymExpr zero = env.create_symbol(0, "z", {0, 0});
  EXPECT_TRUE(statically_known_multiple_of(zero + 8, 4, env));
  EXPECT_EQ(error_of<UserError>([&] { statically_known_multiple_of(s0, 0, env); }),
            "divisibility by zero");
}

using SimplifyWithRanges = SymTest;

TEST_F(SimplifyWithRanges, DivisionsOfSmallValues) {
  env.constrain(0, {2, 6});
  env.constrain(1, {6, 9});
  EXPECT_EQ(simplify(floordiv(s0, 8), env), SymExpr(0));
  EXPECT_EQ(simplify(mod(s0, 8), env), s0);
  EXPECT_EQ(simplify(floordiv(s0 + 16, 8), env), SymExpr(2));
  EXPECT_EQ(simplify(floordiv(s0 + 9, 8), env), SymExpr(1));
  EXPECT_EQ(simplify(mod(s0 + 9, 8), env), s0 + 1);
  // s0 + s1 is in [8, 15]: quotient 1, remainder s0 + s1 - 8.
  EXPECT_EQ(simplify(floordiv(s0 + s1, 8), env), SymExpr(1));
  EXPECT_EQ(simplify(mod(s0 + s1, 8), env), s0 + s1 - 8);
  EXPECT_EQ(simplify(mod(mod(s2, 4), 12), env), mod(s2, 4));
  // Not known: s1 // 8 may be 0 or 1, s0 % 4 may wrap.
  EXPECT_EQ(simplify(floordiv(s1, 8), env), floordiv(s1, 8));
  EXPECT_EQ(simplify(mod(s0, 4), env), mod(s0, 4));
}

TEST_F(SimplifyWithRanges, DivisionsBySymbols) {
  env.constrain(0, {2, 7});
  SymExpr big = env.create_symbol(100, "n", Range::at_least(8));
  EXPECT_EQ(simplify(floordiv(s0, big), env), SymExpr(0));
  EXPECT_EQ(simplify(mod(s0, big), env), s0);
  EXPECT_EQ(simplify(floordiv(big, s0), env), floordiv(big, s0));
  EXPECT_EQ(simplify(floordiv(s1, big), env), floordiv(s1, big));  // s1 may be large
}

TEST_F(SimplifyWithRanges, MinAndMax) {
  env.constrain(0, {2, 7});
  EXPECT_EQ(simplify(min(s0, 8), env), s0);
  EXPECT_EQ(simplify(max(s0, 1), env), s0);
  EXPECT_EQ(simplify(max(s0, 7), env), SymExpr(7));
  EXPECT_EQ(simplify(min(s0 + s1, s1), env), s1);
  EXPECT_EQ(simplify(min(s0, s1), env), min(s0, s1));
}

TEST_F(SimplifyWithRanges, RewritesInsideAtoms) {
  env.constrain(0, {2, 7});
  EXPECT_EQ(simplify(floordiv(s1 + floordiv(s0, 8), 4), env), floordiv(s1, 4));
  EXPECT_EQ(simplify(s2 * mod(s0, 16) + 1, env), s0 * s2 + 1);
}

using HintsAndSubstitution = SymTest;

TEST_F(HintsAndSubstitution, HintEvaluatesWithTheTracedValues) {
  EXPECT_EQ(hint(s0 * 2 + s1, env), 17);
  EXPECT_EQ(hint(floordiv(s0 * s1, s2) - mod(s1, 4), env), 8);
}

TEST_F(HintsAndSubstitution, SubstitutesAndRecanonicalizes) {
  EXPECT_EQ(substitute(s0 * 2 + s1, {{0, s1 + 1}}), s1 * 3 + 2);
  EXPECT_EQ(substitute(floordiv(s0 + s1, 4), {{0, s2 * 4}}), s2 + floordiv(s1, 4));
  EXPECT_EQ(substitute(mod(s0, s1), {{1, 1}}), SymExpr(0));
  EXPECT_EQ(substitute(min(s0, s1), {{0, s1}}), s1);
  EXPECT_EQ(substitute(s0 * s1, {}), s0 * s1);
  EXPECT_EQ(error_of<UserError>([&] {
              substitute(floordiv(s0, s1), {{1, 0}});
            }),
            "division by zero");
}

using GuardPins = SymTest;

TEST_F(GuardPins, AnEqualityWithAConstantPinsTheSymbol) {
  GuardRecorder guards(env);
  // s1 (hint 7) against a weight's width 7: true, recorded, and s1 is 7 from then on.
  EXPECT_TRUE(guards.decide(s1, Rel::EQ, 7));
  EXPECT_EQ(env.range(1).lo, 7);
  EXPECT_EQ(env.range(1).hi, 7);
  EXPECT_EQ(simplify(floordiv(s1 * 4, 2) + s0, env), s0 + 14);
  EXPECT_EQ(guards.specialize(s1 * 3), 21);
  ASSERT_EQ(guards.guards().size(), 1u);
  EXPECT_EQ(print(guards.guards()[0]), "s1 == 7");
  // A false equality or a relation pins nothing.
  EXPECT_FALSE(guards.decide(s0, Rel::EQ, 4));
  EXPECT_TRUE(guards.decide(s2, Rel::LT, 4));
  EXPECT_EQ(env.range(0).hi, Range::kPosInf);
  EXPECT_EQ(env.range(2).hi, Range::kPosInf);
  // `not (s0 != 5)` is s0 == 5.
  EXPECT_FALSE(guards.decide(s0, Rel::NE, 5));
  EXPECT_EQ(env.range(0).lo, 5);
}

}  // namespace
}  // namespace ember::sym
