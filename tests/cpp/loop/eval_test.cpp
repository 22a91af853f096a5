#include "loop/eval.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loop/parser.h"
#include "loop/simplify.h"
#include "support/error.h"
#include "test_util.h"

namespace ember::loop {
namespace {

std::vector<Scalar> floats(std::vector<double> values) {
  std::vector<Scalar> out;
  for (double v : values) out.push_back(Scalar::of_float(DType::Float32, v));
  return out;
}

TEST(RunKernel, ComputesSoftmax) {
  Kernel k = parse_kernel(testing::read_golden("softmax.loop"));
  BufferMap buffers;
  buffers["x"] = floats({1, 2, 3, -1, 0, 1000});
  run_kernel(k, {{"s0", 2}, {"s1", 3}}, buffers);
  const std::vector<Scalar>& y = buffers.at("y");
  ASSERT_EQ(y.size(), 6u);
  double z = std::exp(-2.0) + std::exp(-1.0) + 1;
  EXPECT_NEAR(y[0].f, std::exp(-2.0) / z, 1e-7);
  EXPECT_NEAR(y[2].f, 1 / z, 1e-7);
  EXPECT_NEAR(y[5].f, 1.0, 1e-7);  // the max is subtracted first, so no overflow
  EXPECT_EQ(y[3].f, 0.0);
}

TEST(RunKernel, ComputesLayerNormWithWelford) {
  Kernel k = parse_kernel(testing::read_golden("layer_norm.loop"));
  BufferMap buffers;
  buffers["x"] = floats({1, 2, 3, 4, 10, 10, 10, 10});
  buffers["w"] = floats({1, 1, 2, 2});
  buffers["b"] = floats({0, 0, 0, 1});
  run_kernel(k, {{"s0", 2}, {"s1", 4}}, buffers);
  EXPECT_FLOAT_EQ(buffers.at("mean")[0].f, 2.5);
  double rstd = 1 / std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(buffers.at("rstd")[0].f, rstd, 1e-6);
  EXPECT_NEAR(buffers.at("y")[0].f, -1.5 * rstd, 1e-6);
  EXPECT_NEAR(buffers.at("y")[3].f, 1.5 * rstd * 2 + 1, 1e-6);
  EXPECT_FLOAT_EQ(buffers.at("y")[7].f, 1);  // constant row: zero deviation, plus bias
}

TEST(RunKernel, ComputesArgmaxWithPaddingAndTies) {
  Kernel k = parse_kernel(testing::read_golden("argmax_pad.loop"));
  BufferMap buffers;
  buffers["x"] = floats({-1, 5, 2, 5});
  run_kernel(k, {{"n", 4}}, buffers);
  EXPECT_EQ(buffers.at("v")[0].f, 5);
  EXPECT_EQ(buffers.at("k")[0].i, 1);  // first of the tied maxima, padding removed

  buffers = {};
  buffers["x"] = floats({-1, NAN, -2});
  run_kernel(k, {{"n", 3}}, buffers);
  EXPECT_TRUE(std::isnan(buffers.at("v")[0].f));
  EXPECT_EQ(buffers.at("k")[0].i, 1);

  buffers = {};
  buffers["x"] = {};
  run_kernel(k, {{"n", 0}}, buffers);
  EXPECT_EQ(buffers.at("v")[0].f, 0);  // only padding: argmax is the first pad
  EXPECT_EQ(buffers.at("k")[0].i, -1);
}

TEST(RunKernel, GivesTheSameResultsAfterSimplify) {
  for (const char* name : {"softmax.loop", "layer_norm.loop"}) {
    Kernel k = parse_kernel(testing::read_golden(name));
    BufferMap a, b;
    a["x"] = b["x"] = floats({0.5, -2, 3, 7, 1, 1});
    a["w"] = b["w"] = floats({2, 3, 4});
    a["b"] = b["b"] = floats({1, 0, -1});
    run_kernel(k, {{"s0", 2}, {"s1", 3}}, a);
    run_kernel(simplify(k), {{"s0", 2}, {"s1", 3}}, b);
    for (const auto& [buf, values] : a) {
      for (size_t i = 0; i < values.size(); ++i) {
        EXPECT_EQ(values[i].f, b.at(buf)[i].f) << name << " " << buf << "[" << i << "]";
      }
    }
  }
}

TEST(RunKernel, ReportsOutOfBoundsAccesses) {
  Kernel k = parse_kernel(
      "kernel k(n) {\n  input x : f32[n] strides [1]\n  output y : f32[n] strides [1]\n"
      "  for (i, 0, n) {\n    y[i] = x[(i + 1)]\n  }\n}\n");
  BufferMap buffers;
  buffers["x"] = floats({1, 2});
  try {
    run_kernel(k, {{"n", 2}}, buffers);
    FAIL() << "expected a throw";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "index 2 of buffer 'x' is out of bounds [0, 2)");
  }
  EXPECT_THROW(run_kernel(k, {}, buffers), UserError);
}

TEST(EvalExpr, FollowsTheIntegerSemantics) {
  EvalEnv env;
  auto ev = [&](const Expr& e) { return eval_expr(e, env); };
  EXPECT_EQ(ev(floordiv(idx(-7), idx(2))).i, -4);
  EXPECT_EQ(ev(mod(idx(-7), idx(2))).i, 1);
  EXPECT_EQ(ev(Add::make(IntImm::make(DType::Int8, 127), IntImm::make(DType::Int8, 1))).i, -128);
  EXPECT_EQ(ev(Cast::make(DType::UInt8, idx(-1))).i, 255);
  EXPECT_EQ(ev(Cast::make(DType::Bool, f32(-0.0))).i, 0);
  EXPECT_THROW(ev(floordiv(idx(1), idx(0))), UserError);
}

TEST(EvalExpr, CheckIndexPassesIndicesInRangeAndThrowsOnOthers) {
  EvalEnv env;
  auto check = [&](int64_t x) {
    return eval_expr(Call::make(CallFn::CheckIndex, {idx(x), idx(-3), idx(3)}), env).i;
  };
  EXPECT_EQ(check(-3), -3);
  EXPECT_EQ(check(2), 2);
  try {
    check(3);
    FAIL() << "expected a throw";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "index 3 is out of range [-3, 3)");
  }
}

TEST(EvalExpr, ShiftsAsTorchsCpuKernels) {
  EvalEnv env;
  auto ev = [&](DType t, ExprKind k, int64_t a, int64_t b) {
    return eval_expr(make_binary(k, IntImm::make(t, a), IntImm::make(t, b)), env).i;
  };
  // Left: out-of-range and negative amounts give 0; bits shifted out of the type are dropped.
  EXPECT_EQ(ev(DType::Int64, ExprKind::Shl, -3, 2), -12);
  EXPECT_EQ(ev(DType::Int64, ExprKind::Shl, 1, 63), INT64_MIN);
  EXPECT_EQ(ev(DType::Int64, ExprKind::Shl, 1, 64), 0);
  EXPECT_EQ(ev(DType::Int32, ExprKind::Shl, 5, -1), 0);
  EXPECT_EQ(ev(DType::UInt8, ExprKind::Shl, 129, 1), 2);
  EXPECT_EQ(ev(DType::Int8, ExprKind::Shl, 127, 7), -128);
  // Right: arithmetic for signed types; amounts out of range shift by width - 1 (u8: by 8).
  EXPECT_EQ(ev(DType::Int64, ExprKind::Shr, -5, 1), -3);
  EXPECT_EQ(ev(DType::Int64, ExprKind::Shr, -5, 64), -1);
  EXPECT_EQ(ev(DType::Int16, ExprKind::Shr, 300, -2), 0);
  EXPECT_EQ(ev(DType::Int8, ExprKind::Shr, -128, 7), -1);
  EXPECT_EQ(ev(DType::UInt8, ExprKind::Shr, 255, 7), 1);
  EXPECT_EQ(ev(DType::UInt8, ExprKind::Shr, 255, 8), 0);
  EXPECT_EQ(ev(DType::Int16, ExprKind::BitAnd, -1, 0x1234), 0x1234);
  EXPECT_EQ(ev(DType::UInt8, ExprKind::BitXor, 255, 1), 254);
  EXPECT_EQ(ev(DType::Int32, ExprKind::BitOr, -8, 3), -5);
}

TEST(EvalExpr, FollowsTheFloatSemantics) {
  EvalEnv env;
  auto ev = [&](const Expr& e) { return eval_expr(e, env); };
  EXPECT_TRUE(std::isnan(ev(min(f32(NAN), f32(1))).f));
  EXPECT_EQ(ev(f32(0.1) + f32(0.2)).f, static_cast<double>(0.1f + 0.2f));
  EXPECT_EQ(ev(FloatImm::make(DType::BFloat16, 1.00390625)).f, 1.0);  // ties to even
  EXPECT_EQ(ev(Call::make(CallFn::Round, {f32(2.5)})).f, 2.0);
  EXPECT_EQ(ev(Call::make(CallFn::Sigmoid, {f32(0)})).f, 0.5);
  EXPECT_THROW(ev(FloatImm::make(DType::Float16, 1)), Unsupported);
}

}  // namespace
}  // namespace ember::loop
