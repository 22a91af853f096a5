// Randomized check of the simplifier against the reference interpreter: random small
// expressions, evaluated at random points inside the variables' bounds, give the same value
// before and after simplification (bit for bit, for floats).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "loop/eval.h"
#include "loop/printer.h"
#include "loop/simplify.h"

namespace ember::loop {
namespace {

class RandomExprs {
 public:
  explicit RandomExprs(uint32_t seed) : rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t range(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  /// A random i64 expression over i in [0, 7], j in [0, 3], k in [-20, 20] and size n.
  Expr index(int depth) {
    if (depth == 0 || pick(4) == 0) {
      switch (pick(5)) {
        case 0:
          return var("i");
        case 1:
          return var("j");
        case 2:
          return var("k");
        case 3:
          return size("n");
        default:
          return idx(range(-6, 6));
      }
    }
    Expr a = index(depth - 1);
    switch (pick(10)) {
      case 0:
      case 1:
        return a + index(depth - 1);
      case 2:
        return a - index(depth - 1);
      case 3:
        return a * idx(range(-3, 5));
      case 4:
        return depth <= 2 ? a * index(depth - 1) : a + idx(1);  // no i64 overflow
      case 5:
        return floordiv(a, idx(range(1, 6)));
      case 6:
        return mod(a, idx(range(1, 6)));
      case 7:
        return min(a, index(depth - 1));
      case 8:
        return max(a, index(depth - 1));
      default:
        return Select::make(condition(depth - 1), a, index(depth - 1));
    }
  }

  Expr condition(int depth) {
    if (depth == 0) return bool_imm(pick(2) == 0);
    switch (pick(6)) {
      case 0:
        return LT::make(index(depth - 1), index(depth - 1));
      case 1:
        return LE::make(index(depth - 1), index(depth - 1));
      case 2:
        return EQ::make(index(depth - 1), index(depth - 1));
      case 3:
        return And::make(condition(depth - 1), condition(depth - 1));
      case 4:
        return Or::make(condition(depth - 1), condition(depth - 1));
      default:
        return Not::make(condition(depth - 1));
    }
  }

  /// A random f32 expression over t, u and special constants.
  Expr value(int depth) {
    if (depth == 0 || pick(4) == 0) {
      static const double kConsts[] = {0.0, -0.0, 1.0, -1.0, 0.1, 2.5, INFINITY, NAN};
      switch (pick(3)) {
        case 0:
          return Var::make("t", DType::Float32);
        case 1:
          return Var::make("u", DType::Float32);
        default:
          return f32(kConsts[pick(8)]);
      }
    }
    Expr a = value(depth - 1);
    switch (pick(9)) {
      case 0:
        return a + value(depth - 1);
      case 1:
        return a - value(depth - 1);
      case 2:
        return a * value(depth - 1);
      case 3:
        return Div::make(a, value(depth - 1));
      case 4:
        return min(a, value(depth - 1));
      case 5:
        return max(a, value(depth - 1));
      case 6:
        return Cast::make(DType::Float32, index(depth - 1));
      case 7:
        return Select::make(LT::make(a, value(depth - 1)), a, value(depth - 1));
      default:
        return Cast::make(DType::Float32, Cast::make(DType::Float64, a));
    }
  }

  EvalEnv point() {
    EvalEnv env;
    env.sizes["n"] = range(0, 12);
    env.vars["i"] = Scalar::of_int(DType::Int64, range(0, 7));
    env.vars["j"] = Scalar::of_int(DType::Int64, range(0, 3));
    env.vars["k"] = Scalar::of_int(DType::Int64, range(-20, 20));
    static const double kFloats[] = {0.0, -0.0, 1.0, -3.5, 1e30, INFINITY, NAN, 0.1};
    env.vars["t"] = Scalar::of_float(DType::Float32, kFloats[pick(8)]);
    env.vars["u"] = Scalar::of_float(DType::Float32, kFloats[pick(8)]);
    return env;
  }

 private:
  std::mt19937 rng_;
};

VarBounds bounds() {
  return {
      {"i", Interval::range(0, 7)}, {"j", Interval::range(0, 3)}, {"k", Interval::range(-20, 20)}};
}

bool same_value(const Scalar& a, const Scalar& b) {
  if (a.dtype != b.dtype) return false;
  if (!is_float(a.dtype)) return a.i == b.i;
  if (std::isnan(a.f) && std::isnan(b.f)) return true;
  return std::memcmp(&a.f, &b.f, sizeof a.f) == 0;
}

void check_preserved(const Expr& before, RandomExprs& gen, int trial) {
  Expr after = simplify(before, bounds());
  EXPECT_EQ(print_expr(simplify(after, bounds())), print_expr(after))
      << "not idempotent on " << before;
  for (int p = 0; p < 8; ++p) {
    EvalEnv env = gen.point();
    Scalar x = eval_expr(before, env);
    Scalar y = eval_expr(after, env);
    ASSERT_TRUE(same_value(x, y)) << "trial " << trial << ": " << before << "\n  became " << after
                                  << "\n  " << x.as_double() << " vs " << y.as_double()
                                  << " at i=" << env.vars["i"].i << " j=" << env.vars["j"].i
                                  << " k=" << env.vars["k"].i << " n=" << env.sizes["n"]
                                  << " t=" << env.vars["t"].f << " u=" << env.vars["u"].f;
  }
}

TEST(SimplifyProperty, PreservesRandomIndexExpressions) {
  RandomExprs gen(1234);
  for (int trial = 0; trial < 3000; ++trial) check_preserved(gen.index(4), gen, trial);
}

TEST(SimplifyProperty, PreservesRandomConditions) {
  RandomExprs gen(99);
  for (int trial = 0; trial < 1500; ++trial) check_preserved(gen.condition(3), gen, trial);
}

TEST(SimplifyProperty, PreservesRandomFloatExpressionsBitForBit) {
  RandomExprs gen(7);
  for (int trial = 0; trial < 3000; ++trial) check_preserved(gen.value(4), gen, trial);
}

TEST(SimplifyProperty, ShrinksIndexExpressionsOnAverage) {
  RandomExprs gen(5);
  size_t before = 0, after = 0;
  for (int trial = 0; trial < 500; ++trial) {
    Expr e = gen.index(4);
    before += print_expr(e).size();
    after += print_expr(simplify(e, bounds())).size();
  }
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace ember::loop
