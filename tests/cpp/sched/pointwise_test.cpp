#include "sched/pointwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "loop/eval.h"
#include "loop/simplify.h"
#include "support/error.h"

namespace ember::sched {
namespace {

using graph::Arg;
using graph::DType;
using graph::NoneArg;
using graph::ValueRef;
using Fn = std::function<double(double)>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
/// Element values every unary op is checked at: bf16-exact, with the special cases.
const std::vector<double> kValues = {-3.5, -1,  -0.5, -0.0, 0,    0.25, 0.5,
                                     1,    2.5, 7,    kNaN, kInf, -kInf};

graph::TensorType type(DType t, graph::Dims sizes = {4}, graph::Device dev = {}) {
  graph::TensorType tt;
  tt.dtype = t;
  tt.device = dev;
  tt.strides = graph::contiguous_strides(sizes);
  tt.sizes = std::move(sizes);
  return tt;
}

/// Rounds to bf16 (nearest even), as eager's float -> bf16 conversion.
double bf16(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(f)) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
double f32(double v) {
  return static_cast<float>(v);
}

/// A graph of inputs and one node, and the evaluation of its lowering.
struct OneOp {
  graph::Graph g;

  ValueRef in(DType t, graph::Dims sizes = {4}, graph::Device dev = {}) {
    return ValueRef{g.add_input(type(t, std::move(sizes), dev), graph::InputKind::User)};
  }
  OneOp& call(const std::string& qualified, std::vector<std::string> names, std::vector<Arg> args,
              DType out, graph::Device dev = {}) {
    size_t dot = qualified.find('.');
    graph::OpInfo op{qualified.substr(0, dot),
                     dot == std::string::npos ? "" : qualified.substr(dot + 1), names,
                     std::vector<bool>(names.size(), false)};
    g.add_node(g.intern_op(op), std::move(args), {type(out, {4}, dev)});
    return *this;
  }
  const graph::Node& node() const { return g.nodes.back(); }
  bool pointwise() const { return is_pointwise(g, node()); }
  /// The lowering with input k read as variable `vk`.
  loop::Expr lower() const {
    std::vector<loop::Expr> ins;
    for (const Arg& a : node().args) {
      if (const auto* v = std::get_if<ValueRef>(&a)) {
        auto t = *to_loop_dtype(g.type(v->id).dtype);
        ins.push_back(loop::Var::make("v" + std::to_string(ins.size()), t));
      }
    }
    return lower_pointwise(g, node(), ins);
  }
  /// The output element for input elements `vals`; also checks the type and that the
  /// simplified expression agrees.
  double eval(const std::vector<double>& vals) const {
    loop::Expr e = lower();
    EXPECT_EQ(e.dtype(), *to_loop_dtype(g.type(node().outputs[0]).dtype));
    loop::EvalEnv env;
    size_t k = 0;
    for (const Arg& a : node().args) {
      if (const auto* v = std::get_if<ValueRef>(&a)) {
        auto t = *to_loop_dtype(g.type(v->id).dtype);
        double x = vals.at(k);
        env.vars["v" + std::to_string(k++)] =
            loop::is_float(t) ? loop::Scalar::of_float(t, x)
                              : loop::Scalar::of_int(t, static_cast<int64_t>(x));
      }
    }
    double r = loop::eval_expr(e, env).as_double();
    double s = loop::eval_expr(loop::simplify(e), env).as_double();
    EXPECT_TRUE((std::isnan(r) && std::isnan(s)) || r == s) << r << " vs simplified " << s;
    return r;
  }
};

::testing::AssertionResult close(double got, double want) {
  if (std::isnan(want)
          ? std::isnan(got)
          : (std::isinf(want) ? got == want
                              : std::abs(got - want) <= 1e-7 + 1.3e-6 * std::abs(want))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << got << ", want " << want;
}

/// A one-input float op (extra Scalar args appended) of dtype `t`, checked against `ref` at
/// kValues; `round` maps the reference to the output type.
void check_unary(const std::string& op, std::vector<std::string> names, std::vector<Arg> extra,
                 DType t, const Fn& ref) {
  OneOp f;
  std::vector<Arg> args = {f.in(t)};
  args.insert(args.end(), extra.begin(), extra.end());
  f.call(op, std::move(names), std::move(args), t);
  ASSERT_TRUE(f.pointwise()) << op;
  for (double x : kValues) {
    double want = ref(x);
    if (t == DType::Float32) want = f32(want);
    if (t == DType::BFloat16) want = bf16(want);
    EXPECT_TRUE(close(f.eval({x}), want)) << op << " at " << x;
  }
}
void check_unary(const std::string& op, DType t, const Fn& ref) {
  check_unary(op, {"self"}, {}, t, ref);
}

// ---- dtypes ------------------------------------------------------------------------------------

TEST(ToLoopDtype, MapsTheTypesTheLoopIrHas) {
  EXPECT_EQ(to_loop_dtype(DType::Float32), loop::DType::Float32);
  EXPECT_EQ(to_loop_dtype(DType::BFloat16), loop::DType::BFloat16);
  EXPECT_EQ(to_loop_dtype(DType::Bool), loop::DType::Bool);
  EXPECT_EQ(to_loop_dtype(DType::UInt8), loop::DType::UInt8);
  EXPECT_EQ(to_loop_dtype(DType::ComplexFloat), std::nullopt);
  EXPECT_EQ(to_loop_dtype(DType::Float8_e4m3fn), std::nullopt);
  EXPECT_EQ(to_loop_dtype(DType::UInt32), std::nullopt);
}

// ---- is_pointwise ------------------------------------------------------------------------------

TEST(IsPointwise, RejectsUnknownOpsAndOverloads) {
  OneOp f;
  auto x = f.in(DType::Float32);
  f.call("aten::sum", {"self", "dtype"}, {x, NoneArg{}}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::add.out", {"self", "other", "alpha", "out"}, {x, x, int64_t{1}, x}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::round.decimals", {"self", "decimals"}, {x, int64_t{2}}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  EXPECT_THROW(f.lower(), InternalError);
  f.call("aten::add.Tensor", {"self", "other", "alpha"}, {x, x, int64_t{1}}, DType::Float32);
  EXPECT_TRUE(f.pointwise());
}

TEST(IsPointwise, RejectsDtypesTheLoopIrLacks) {
  OneOp f;
  auto c = f.in(DType::ComplexFloat);
  auto u = f.in(DType::UInt16);
  f.call("aten::neg", {"self"}, {c}, DType::ComplexFloat);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::neg", {"self"}, {u}, DType::UInt16);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::abs", {"self"}, {c}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
}

TEST(IsPointwise, RejectsBoolWhereANumberIsExpected) {
  OneOp f;
  auto x = f.in(DType::Float32);
  f.call("aten::mul.Scalar", {"self", "other"}, {x, true}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::add.Tensor", {"self", "other", "alpha"}, {x, x, true}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::leaky_relu", {"self", "negative_slope"}, {x, false}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  auto b = f.in(DType::Bool);
  f.call("aten::mul.Tensor", {"self", "other"}, {b, b}, DType::Bool);  // logical and in eager
  EXPECT_FALSE(f.pointwise());
  f.call("aten::neg", {"self"}, {b}, DType::Bool);
  EXPECT_FALSE(f.pointwise());
}

TEST(IsPointwise, RejectsIntegerAndReducedPrecisionRoundingDivision) {
  OneOp f;
  auto i = f.in(DType::Int64);
  auto h = f.in(DType::BFloat16);
  auto x = f.in(DType::Float32);
  std::vector<std::string> names = {"self", "other", "rounding_mode"};
  f.call("aten::div.Tensor_mode", names, {i, i, std::string("floor")}, DType::Int64);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::div.Tensor_mode", names, {h, h, std::string("trunc")}, DType::BFloat16);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::div.Tensor_mode", names, {x, x, std::string("round")}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::div.Tensor_mode", names, {x, x, std::string("floor")}, DType::Float32);
  EXPECT_TRUE(f.pointwise());
  f.call("aten::div.Tensor_mode", names, {i, i, NoneArg{}}, DType::Float32);
  EXPECT_TRUE(f.pointwise());
}

TEST(IsPointwise, RejectsAlphaOtherThanOneInReducedPrecision) {
  OneOp f;
  auto h = f.in(DType::BFloat16);
  f.call("aten::add.Tensor", {"self", "other", "alpha"}, {h, h, 2.0}, DType::BFloat16);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::add.Tensor", {"self", "other", "alpha"}, {h, h, int64_t{1}}, DType::BFloat16);
  EXPECT_TRUE(f.pointwise());
  auto i = f.in(DType::Int32);
  f.call("aten::add.Tensor", {"self", "other", "alpha"}, {i, i, 2.5}, DType::Int32);
  EXPECT_FALSE(f.pointwise());
}

TEST(IsPointwise, RejectsZeroDimOperandsWhosePromotionIsAmbiguous) {
  // A 0-dim f64 may be a wrapped Python float (promotes an int tensor to f32) or a real tensor
  // (promotes it to f64): comparisons, which compute in the promoted type, are left to ATen.
  OneOp f;
  auto i = f.in(DType::Int32);
  auto x = f.in(DType::Float32);
  auto d = f.in(DType::Float64, {});
  f.call("aten::lt.Tensor", {"self", "other"}, {i, d}, DType::Bool);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::lt.Tensor", {"self", "other"}, {x, d}, DType::Bool);
  EXPECT_TRUE(f.pointwise());
  f.call("aten::lt.Scalar", {"self", "other"}, {i, 0.5}, DType::Bool);
  EXPECT_TRUE(f.pointwise());
  f.call("aten::lt.Scalar", {"self", "other"}, {i, d}, DType::Bool);  // wrong overload
  EXPECT_FALSE(f.pointwise());
}

TEST(IsPointwise, RejectsMixedReducedPrecisionOperandsOffTheCpu) {
  graph::Device cuda{graph::DeviceKind::CUDA, 0};
  OneOp f;
  auto h = f.in(DType::BFloat16, {4}, cuda);
  // A 0-dim CPU tensor is a scalar CUDA reads in f32 (lowered so); a 0-dim CUDA tensor of
  // another dtype is converted to bf16 first there, which is not lowered for CUDA yet.
  auto d = f.in(DType::Float64, {});
  f.call("aten::mul.Tensor", {"self", "other"}, {h, d}, DType::BFloat16, cuda);
  EXPECT_TRUE(f.pointwise());
  auto dc = f.in(DType::Float64, {}, cuda);
  f.call("aten::mul.Tensor", {"self", "other"}, {h, dc}, DType::BFloat16, cuda);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::mul.Tensor", {"self", "other"}, {h, h}, DType::BFloat16, cuda);
  EXPECT_TRUE(f.pointwise());
  auto hc = f.in(DType::BFloat16);
  f.call("aten::mul.Tensor", {"self", "other"}, {hc, d}, DType::BFloat16);
  EXPECT_TRUE(f.pointwise());
}

TEST(IsPointwise, AcceptsConversionsThatChangeOnlyTheDtype) {
  OneOp f;
  auto x = f.in(DType::Float32);
  std::vector<std::string> names = {"self",       "dtype",        "layout",       "device",
                                    "pin_memory", "non_blocking", "memory_format"};
  auto to_copy = [&](Arg dtype, Arg layout, Arg device, Arg mf, DType out) {
    f.call("aten::_to_copy", names, {x, dtype, layout, device, NoneArg{}, false, mf}, out);
    return f.pointwise();
  };
  graph::Device cpu{};
  EXPECT_TRUE(to_copy(DType::BFloat16, NoneArg{}, NoneArg{}, NoneArg{}, DType::BFloat16));
  EXPECT_TRUE(to_copy(DType::Int32, graph::Layout::Strided, cpu, graph::MemoryFormat::Preserve,
                      DType::Int32));
  EXPECT_TRUE(to_copy(NoneArg{}, NoneArg{}, NoneArg{}, NoneArg{}, DType::Float32));
  EXPECT_FALSE(to_copy(DType::Float64, NoneArg{}, graph::Device{graph::DeviceKind::CUDA, 0},
                       NoneArg{}, DType::Float64));
  EXPECT_FALSE(
      to_copy(DType::Float64, graph::Layout::Sparse, NoneArg{}, NoneArg{}, DType::Float64));
  // A memory format is the output's traced strides, which the kernel writes at.
  EXPECT_TRUE(to_copy(DType::Float64, NoneArg{}, NoneArg{}, graph::MemoryFormat::ChannelsLast,
                      DType::Float64));
  EXPECT_FALSE(to_copy(DType::ComplexFloat, NoneArg{}, NoneArg{}, NoneArg{}, DType::ComplexFloat));

  std::vector<std::string> to_names = {"self", "dtype", "non_blocking", "copy", "memory_format"};
  f.call("aten::to.dtype", to_names, {x, DType::Float64, false, false, NoneArg{}}, DType::Float64);
  EXPECT_TRUE(f.pointwise());
  // Same dtype without copy: eager returns `self` itself, an alias.
  f.call("aten::to.dtype", to_names, {x, DType::Float32, false, false, NoneArg{}}, DType::Float32);
  EXPECT_FALSE(f.pointwise());

  f.call("aten::clone", {"self", "memory_format"}, {x, graph::MemoryFormat::Contiguous},
         DType::Float32);
  EXPECT_TRUE(f.pointwise());
  f.call("aten::clone", {"self", "memory_format"}, {x, graph::MemoryFormat::ChannelsLast},
         DType::Float32);
  EXPECT_TRUE(f.pointwise());
}

TEST(IsPointwise, RejectsArgumentsOutsideTheSupportedForms) {
  OneOp f;
  auto x = f.in(DType::Float32);
  auto i8 = f.in(DType::Int8);
  auto i = f.in(DType::Int64);
  f.call("aten::gelu", {"self", "approximate"}, {x, std::string("erf")}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::where.self", {"condition", "self", "other"}, {i8, x, x}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::clamp", {"self", "min", "max"}, {i8, int64_t{1000}, NoneArg{}}, DType::Int8);
  EXPECT_FALSE(f.pointwise());  // eager raises: 1000 does not fit int8
  f.call("aten::clamp", {"self", "min", "max"}, {x, NoneArg{}, NoneArg{}}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::clamp", {"self", "min", "max"}, {x, kNaN, 1.0}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::bitwise_not", {"self"}, {x}, DType::Float32);
  EXPECT_FALSE(f.pointwise());  // eager has no bitwise ops of floats
  f.call("aten::bitwise_and.Scalar", {"self", "other"}, {i8, int64_t{300}}, DType::Int8);
  EXPECT_FALSE(f.pointwise());  // 300 does not fit int8
  f.call("aten::bitwise_left_shift.Tensor", {"self", "other"}, {f.in(DType::Bool), i},
         DType::Int64);
  EXPECT_TRUE(f.pointwise());
  f.call("aten::__lshift__.Scalar", {"self", "other"}, {f.in(DType::Bool), true}, DType::Bool);
  EXPECT_FALSE(f.pointwise());  // eager has no shifts of booleans
  f.call("aten::addcdiv", {"self", "tensor1", "tensor2", "value"}, {x, i, i, 1.0}, DType::Float32);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::pow.Tensor_Scalar", {"self", "exponent"}, {i, int64_t{2}}, DType::Int64);
  EXPECT_FALSE(f.pointwise());
  f.call("aten::exp", {"self"}, {i}, DType::Int64);
  EXPECT_FALSE(f.pointwise());
}

// ---- lower_pointwise: math -------------------------------------------------------------------

TEST(LowerPointwise, UnaryFloatFunctionsMatchLibm) {
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"exp", [](double x) { return std::exp(x); }},
      {"exp2", [](double x) { return std::exp2(x); }},
      {"expm1", [](double x) { return std::expm1(x); }},
      {"log", [](double x) { return std::log(x); }},
      {"log2", [](double x) { return std::log2(x); }},
      {"log10", [](double x) { return std::log10(x); }},
      {"log1p", [](double x) { return std::log1p(x); }},
      {"sqrt", [](double x) { return std::sqrt(x); }},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }},
      {"reciprocal", [](double x) { return 1 / x; }},
      {"sin", [](double x) { return std::sin(x); }},
      {"cos", [](double x) { return std::cos(x); }},
      {"tan", [](double x) { return std::tan(x); }},
      {"asin", [](double x) { return std::asin(x); }},
      {"acos", [](double x) { return std::acos(x); }},
      {"atan", [](double x) { return std::atan(x); }},
      {"sinh", [](double x) { return std::sinh(x); }},
      {"cosh", [](double x) { return std::cosh(x); }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"asinh", [](double x) { return std::asinh(x); }},
      {"acosh", [](double x) { return std::acosh(x); }},
      {"atanh", [](double x) { return std::atanh(x); }},
      {"erf", [](double x) { return std::erf(x); }},
      {"erfc", [](double x) { return std::erfc(x); }},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"floor", [](double x) { return std::floor(x); }},
      {"ceil", [](double x) { return std::ceil(x); }},
      {"round", [](double x) { return std::nearbyint(x); }},
      {"trunc", [](double x) { return std::trunc(x); }},
      {"neg", [](double x) { return -x; }},
      {"abs", [](double x) { return std::fabs(x); }},
      {"sign", [](double x) { return double((0 < x) - (x < 0)); }},  // sign(nan) = 0 in eager
  };
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (const auto& [name, ref] : ops) check_unary("aten::" + name, t, ref);
  }
}

TEST(LowerPointwise, PromotesIntegerInputsOfFloatFunctions) {
  OneOp f;
  auto i = f.in(DType::Int64);
  f.call("aten::exp", {"self"}, {i}, DType::Float32);
  EXPECT_TRUE(close(f.eval({2}), f32(std::exp(2.0))));
  f.call("aten::div.Tensor", {"self", "other"}, {i, i}, DType::Float32);
  EXPECT_TRUE(close(f.eval({7, 2}), 3.5));
  f.call("aten::floor", {"self"}, {i}, DType::Int64);  // the identity on integers
  EXPECT_EQ(f.eval({-7}), -7);
  f.call("aten::sign", {"self"}, {i}, DType::Int64);
  EXPECT_EQ(f.eval({-7}), -1);
  f.call("aten::isnan", {"self"}, {i}, DType::Bool);
  EXPECT_EQ(f.eval({3}), 0);
}

TEST(LowerPointwise, ArithmeticMatchesEager) {
  OneOp f;
  auto x = f.in(DType::Float32);
  auto y = f.in(DType::Float32);
  auto i = f.in(DType::Int32);
  std::vector<std::string> ta = {"self", "other", "alpha"};
  f.call("aten::add.Tensor", ta, {x, y, int64_t{1}}, DType::Float32);
  EXPECT_EQ(f.eval({1.5, 2.25}), 3.75);
  f.call("aten::add.Tensor", ta, {x, y, 0.5}, DType::Float32);
  EXPECT_EQ(f.eval({1.5, 3}), 3);
  f.call("aten::sub.Tensor", ta, {x, y, int64_t{2}}, DType::Float32);
  EXPECT_EQ(f.eval({1.5, 3}), -4.5);
  f.call("aten::add.Scalar", ta, {x, 0.1, int64_t{1}}, DType::Float32);
  EXPECT_EQ(f.eval({1}), f32(1 + f32(0.1)));
  f.call("aten::sub.Scalar", ta, {x, int64_t{3}, 2.0}, DType::Float32);
  EXPECT_EQ(f.eval({1}), -5);
  f.call("aten::mul.Tensor", {"self", "other"}, {x, y}, DType::Float32);
  EXPECT_TRUE(std::isnan(f.eval({kInf, 0})));
  f.call("aten::mul.Scalar", {"self", "other"}, {x, 0.1}, DType::Float32);
  EXPECT_EQ(f.eval({3}), f32(3 * f32(0.1)));
  f.call("aten::div.Scalar", {"self", "other"}, {x, 0.0}, DType::Float32);
  EXPECT_EQ(f.eval({-1}), -kInf);
  f.call("aten::div.Tensor", {"self", "other"}, {x, y}, DType::Float32);
  EXPECT_EQ(f.eval({1, 3}), f32(1.0f / 3.0f));
  // Integer arithmetic wraps as in two's complement.
  f.call("aten::add.Tensor", ta, {i, i, int64_t{1}}, DType::Int32);
  EXPECT_EQ(f.eval({2147483647, 1}), -2147483648.0);
  f.call("aten::mul.Scalar", {"self", "other"}, {i, int64_t{-3}}, DType::Int32);
  EXPECT_EQ(f.eval({7}), -21);
  f.call("aten::sub.Tensor", ta, {i, i, int64_t{2}}, DType::Int32);
  EXPECT_EQ(f.eval({7, 5}), -3);
  // int32 tensor + float scalar is float in eager: the int operand is cast first.
  f.call("aten::add.Scalar", ta, {i, 0.5, int64_t{1}}, DType::Float32);
  EXPECT_EQ(f.eval({16777217}), f32(16777216.0 + 0.5));
}

TEST(LowerPointwise, CudaDividesByACpuScalarThroughItsReciprocalAsEager) {
  graph::Device cuda{graph::DeviceKind::CUDA, 0};
  OneOp f;
  auto x = f.in(DType::Float32, {4}, cuda);
  auto s = f.in(DType::Float64, {});  // a 0-dim CPU tensor: a scalar to CUDA
  const float a = 5.0f, b = 3.0f;     // 5 / 3 and 5 * (1 / 3) differ in f32
  ASSERT_NE(a / b, a * (1.0f / b));
  f.call("aten::div.Tensor", {"self", "other"}, {x, s}, DType::Float32, cuda);
  EXPECT_EQ(f.eval({a, b}), a * (1.0f / b));  // div_true_kernel_cuda: a * reciprocal(b)
  f.call("aten::div.Scalar", {"self", "other"}, {x, static_cast<double>(b)}, DType::Float32, cuda);
  EXPECT_EQ(f.eval({a}), a * (1.0f / b));
  auto y = f.in(DType::Float32, {4}, cuda);  // a tensor divisor: IEEE division
  f.call("aten::div.Tensor", {"self", "other"}, {x, y}, DType::Float32, cuda);
  EXPECT_EQ(f.eval({a, b}), a / b);
  auto xc = f.in(DType::Float32);  // on the CPU: IEEE division by a scalar too
  f.call("aten::div.Scalar", {"self", "other"}, {xc, static_cast<double>(b)}, DType::Float32);
  EXPECT_EQ(f.eval({a}), a / b);
}

TEST(LowerPointwise, DivisionWithRoundingModeMatchesPythonFloorDivision) {
  const std::vector<double> a = {7, -7, 7, -7.5, 0, 5, -5, 0, kNaN, kInf, 1, -0.0, 3};
  const std::vector<double> b = {2, 2, -2, 2, -3, 0, 0, 0, 2, 2, 0.1, 5, kInf};
  // torch.div(a, b, rounding_mode=...) in eager, float32.
  const std::vector<double> floor = {3,    -4,   -4,   -4, -0.0, kInf, -kInf,
                                     kNaN, kNaN, kNaN, 9,  -0.0, 0};
  const std::vector<double> trunc = {3,    -3,   -3,   -3, -0.0, kInf, -kInf,
                                     kNaN, kNaN, kInf, 10, -0.0, 0};
  for (DType t : {DType::Float32, DType::Float64}) {
    OneOp f;
    auto x = f.in(t), y = f.in(t);
    std::vector<std::string> names = {"self", "other", "rounding_mode"};
    for (size_t k = 0; k < a.size(); ++k) {
      f.call("aten::div.Tensor_mode", names, {x, y, std::string("floor")}, t);
      double got = f.eval({a[k], b[k]});
      EXPECT_TRUE(close(got, floor[k])) << a[k] << " // " << b[k];
      if (!std::isnan(got)) {
        EXPECT_EQ(std::signbit(got), std::signbit(floor[k])) << a[k] << " // " << b[k];
      }
      f.call("aten::div.Tensor_mode", names, {x, y, std::string("trunc")}, t);
      if (t == DType::Float32) {
        EXPECT_TRUE(close(f.eval({a[k], b[k]}), trunc[k])) << a[k];
      }
    }
  }
}

TEST(LowerPointwise, PowSpecialCasesTheExponentLikeEager) {
  auto pow_of = [](DType t, Arg e) {
    OneOp f;
    f.call("aten::pow.Tensor_Scalar", {"self", "exponent"}, {f.in(t), e}, t);
    return f;
  };
  EXPECT_EQ(pow_of(DType::Float32, 2.0).lower().kind(), loop::ExprKind::Mul);
  EXPECT_EQ(pow_of(DType::Float32, 0.5).lower().as<loop::Call>()->fn, loop::CallFn::Sqrt);
  EXPECT_EQ(pow_of(DType::Float32, 1.7).lower().as<loop::Call>()->fn, loop::CallFn::Pow);
  EXPECT_EQ(pow_of(DType::Float32, int64_t{0}).eval({kNaN}), 1);
  EXPECT_EQ(pow_of(DType::Float32, int64_t{3}).eval({-1.5}), -3.375);
  EXPECT_EQ(pow_of(DType::Float32, -2.0).eval({2}), 0.25);
  EXPECT_EQ(pow_of(DType::Float32, -1.0).eval({-0.0}), -kInf);
  EXPECT_TRUE(close(pow_of(DType::Float64, 1.7).eval({2}), std::pow(2.0, 1.7)));
  // bf16 eager rounds x * x before the second multiplication.
  double x = 1.0078125;  // 1 + 2^-7
  EXPECT_EQ(pow_of(DType::BFloat16, int64_t{3}).eval({x}), bf16(bf16(x * x) * x));
  OneOp f;
  auto a = f.in(DType::Float32), b = f.in(DType::Float32);
  f.call("aten::pow.Tensor_Tensor", {"self", "exponent"}, {a, b}, DType::Float32);
  EXPECT_TRUE(close(f.eval({2, 0.5}), f32(std::sqrt(2.0))));
  EXPECT_TRUE(std::isnan(f.eval({-2, 0.5})));
}

TEST(LowerPointwise, ActivationsMatchAtenCpuKernels) {
  using S = std::string;
  for (DType t : {DType::Float32, DType::BFloat16}) {
    check_unary("aten::relu", t, [](double x) { return x < 0 ? 0 : x; });
    check_unary("aten::gelu", {"self", "approximate"}, {S("none")}, t,
                [](double x) { return x * 0.5 * (1 + std::erf(x * 0.70710678118654752440)); });
    check_unary("aten::gelu", {"self", "approximate"}, {S("tanh")}, t, [](double x) {
      return 0.5 * x *
             (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    });
    check_unary("aten::silu", t, [](double x) { return x / (1 + std::exp(-x)); });
    check_unary("aten::mish", t, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); });
    check_unary("aten::hardsigmoid", t, [](double x) {
      return std::isnan(x) ? x : std::min(std::max(x + 3, 0.0), 6.0) / 6;
    });
    check_unary("aten::hardswish", t, [](double x) {
      return std::isnan(x) ? x : x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    });
    check_unary("aten::leaky_relu", {"self", "negative_slope"}, {0.25}, t,
                [](double x) { return x > 0 ? x : x * 0.25; });
    check_unary("aten::elu", {"self", "alpha", "scale", "input_scale"}, {1.5, 2.0, 0.5}, t,
                [](double x) { return x <= 0 ? std::expm1(x * 0.5) * 3 : x * 2; });
    check_unary("aten::softplus", {"self", "beta", "threshold"}, {2.0, int64_t{4}}, t,
                [](double x) { return x * 2 > 4 ? x : std::log1p(std::exp(x * 2)) / 2; });
    check_unary("aten::hardtanh", {"self", "min_val", "max_val"}, {-1.0, 2.0}, t,
                [](double x) { return x < -1 ? -1 : (x > 2 ? 2 : x); });
    check_unary("aten::threshold", {"self", "threshold", "value"}, {0.5, -2.0}, t,
                [](double x) { return x <= 0.5 ? -2 : x; });
    check_unary("aten::clamp", {"self", "min", "max"}, {-0.5, NoneArg{}}, t,
                [](double x) { return x < -0.5 ? -0.5 : x; });
    check_unary("aten::clamp", {"self", "min", "max"}, {1.0, 0.25}, t,
                [](double x) { return std::isnan(x) ? x : 0.25; });  // min > max: max
    check_unary("aten::clamp_min", {"self", "min"}, {int64_t{0}}, t,
                [](double x) { return x < 0 ? 0 : x; });
    check_unary("aten::clamp_max", {"self", "max"}, {0.25}, t,
                [](double x) { return x > 0.25 ? 0.25 : x; });
  }
  // Eager keeps a negative zero and NaN through relu and clamp.
  OneOp f;
  f.call("aten::relu", {"self"}, {f.in(DType::Float32)}, DType::Float32);
  EXPECT_TRUE(std::signbit(f.eval({-0.0})));
}

TEST(LowerPointwise, IntegerClampAndMaximumStayInteger) {
  OneOp f;
  auto i = f.in(DType::Int32), j = f.in(DType::Int32);
  f.call("aten::clamp", {"self", "min", "max"}, {i, int64_t{-2}, int64_t{5}}, DType::Int32);
  EXPECT_EQ(f.eval({-7}), -2);
  EXPECT_EQ(f.eval({9}), 5);
  f.call("aten::maximum", {"self", "other"}, {i, j}, DType::Int32);
  EXPECT_EQ(f.eval({-7, 3}), 3);
  f.call("aten::minimum", {"self", "other"}, {i, j}, DType::Int32);
  EXPECT_EQ(f.eval({-7, 3}), -7);
  f.call("aten::clamp", {"self", "min", "max"}, {i, 0.5, NoneArg{}}, DType::Float32);
  EXPECT_EQ(f.eval({0}), 0.5);  // a float bound makes a float result
}

TEST(LowerPointwise, MaximumAndMinimumPropagateNan) {
  OneOp f;
  auto x = f.in(DType::Float32), y = f.in(DType::Float32);
  f.call("aten::maximum", {"self", "other"}, {x, y}, DType::Float32);
  EXPECT_TRUE(std::isnan(f.eval({kNaN, 1})));
  EXPECT_TRUE(std::isnan(f.eval({1, kNaN})));
  EXPECT_EQ(f.eval({-1, 2}), 2);
  f.call("aten::minimum", {"self", "other"}, {x, y}, DType::Float32);
  EXPECT_TRUE(std::isnan(f.eval({1, kNaN})));
  EXPECT_EQ(f.eval({-1, 2}), -1);
}

TEST(LowerPointwise, ReducedPrecisionComputesInF32AndRoundsOnce) {
  OneOp f;
  auto h = f.in(DType::BFloat16), k = f.in(DType::BFloat16);
  auto d = f.in(DType::Float64, {});
  auto i = f.in(DType::Int32);
  std::vector<std::string> ta = {"self", "other", "alpha"};
  f.call("aten::add.Tensor", ta, {h, k, int64_t{1}}, DType::BFloat16);
  EXPECT_EQ(f.eval({1, 0.00390625}), 1);  // 1 + 2^-8 is a tie: even
  EXPECT_EQ(f.eval({1, 0.005859375}), 1.0078125);
  // The CPU casts a mixed operand to bf16 first, except a one-element `other` of mul and div.
  double s = 0.1234567;
  f.call("aten::add.Tensor", ta, {h, d, int64_t{1}}, DType::BFloat16);
  EXPECT_EQ(f.eval({3, s}), bf16(3 + bf16(s)));
  f.call("aten::add.Scalar", ta, {h, s, int64_t{1}}, DType::BFloat16);
  EXPECT_EQ(f.eval({3}), bf16(3 + bf16(s)));
  f.call("aten::mul.Tensor", {"self", "other"}, {h, d}, DType::BFloat16);
  EXPECT_EQ(f.eval({3, s}), bf16(3 * f32(s)));
  f.call("aten::mul.Tensor", {"self", "other"}, {d, h}, DType::BFloat16);
  EXPECT_EQ(f.eval({s, 3}), bf16(bf16(s) * 3));
  f.call("aten::div.Scalar", {"self", "other"}, {h, s}, DType::BFloat16);
  EXPECT_EQ(f.eval({3}), bf16(3 / f32(s)));
  f.call("aten::add.Tensor", ta, {i, h, int64_t{1}}, DType::BFloat16);
  EXPECT_EQ(f.eval({257, 0.5}), bf16(bf16(257) + 0.5));
  f.call("aten::gelu", {"self", "approximate"}, {h, std::string("none")}, DType::BFloat16);
  EXPECT_EQ(f.lower().kind(), loop::ExprKind::Cast);  // one rounding, at the end
  // f16 has the same lowering; the interpreter cannot run it.
  auto half = f.in(DType::Float16);
  f.call("aten::silu", {"self"}, {half}, DType::Float16);
  ASSERT_TRUE(f.pointwise());
  EXPECT_EQ(f.lower().dtype(), loop::DType::Float16);
}

TEST(LowerPointwise, ComparisonsComputeInThePromotedType) {
  OneOp f;
  auto i = f.in(DType::Int32), x = f.in(DType::Float32);
  auto u = f.in(DType::UInt8), s = f.in(DType::Int8);
  auto h = f.in(DType::BFloat16), d = f.in(DType::Float64, {});
  std::vector<std::string> names = {"self", "other"};
  f.call("aten::eq.Tensor", names, {i, x}, DType::Bool);  // in f32: 2^24 + 1 rounds to 2^24
  EXPECT_EQ(f.eval({16777217, 16777216}), 1);
  f.call("aten::eq.Tensor", names, {u, s}, DType::Bool);  // in i16: 200 != -56
  EXPECT_EQ(f.eval({200, -56}), 0);
  f.call("aten::le.Scalar", names, {h, 0.1}, DType::Bool);  // the CPU rounds 0.1 to bf16
  EXPECT_EQ(f.eval({0.10009765625}), 1);
  f.call("aten::gt.Scalar", names, {i, 2.5}, DType::Bool);
  EXPECT_EQ(f.eval({3}), 1);
  f.call("aten::lt.Tensor", names, {x, d}, DType::Bool);  // f32: the 0-dim f64 does not promote
  EXPECT_EQ(f.eval({0.1, 0.1}), 0);
  const std::vector<std::tuple<std::string, std::function<bool(double, double)>>> ops = {
      {"eq", [](double a, double b) { return a == b; }},
      {"ne", [](double a, double b) { return a != b; }},
      {"lt", [](double a, double b) { return a < b; }},
      {"le", [](double a, double b) { return a <= b; }},
      {"gt", [](double a, double b) { return a > b; }},
      {"ge", [](double a, double b) { return a >= b; }}};
  auto y = f.in(DType::Float32);
  for (const auto& [name, ref] : ops) {
    f.call("aten::" + name + ".Tensor", names, {x, y}, DType::Bool);
    for (double a : {-1.0, 0.0, 2.0, kNaN}) {
      for (double b : {-1.0, -0.0, kNaN}) {
        EXPECT_EQ(f.eval({a, b}), ref(a, b)) << name;
      }
    }
    f.call("aten::" + name + ".Scalar", names, {x, int64_t{0}}, DType::Bool);
    EXPECT_EQ(f.eval({-0.0}), ref(-0.0, 0)) << name;
  }
}

TEST(LowerPointwise, LogicalOpsWhereAndIsnan) {
  OneOp f;
  auto x = f.in(DType::Float32), b = f.in(DType::Bool), i = f.in(DType::Int64);
  f.call("aten::logical_not", {"self"}, {x}, DType::Bool);
  EXPECT_EQ(f.eval({kNaN}), 0);
  EXPECT_EQ(f.eval({-0.0}), 1);
  f.call("aten::logical_and", {"self", "other"}, {x, i}, DType::Bool);
  EXPECT_EQ(f.eval({0.5, 3}), 1);
  EXPECT_EQ(f.eval({0.5, 0}), 0);
  f.call("aten::logical_or", {"self", "other"}, {b, i}, DType::Bool);
  EXPECT_EQ(f.eval({0, 0}), 0);
  EXPECT_EQ(f.eval({0, -2}), 1);
  f.call("aten::logical_xor", {"self", "other"}, {b, b}, DType::Bool);
  EXPECT_EQ(f.eval({1, 1}), 0);
  f.call("aten::bitwise_not", {"self"}, {b}, DType::Bool);
  EXPECT_EQ(f.eval({1}), 0);
  f.call("aten::bitwise_and.Tensor", {"self", "other"}, {b, b}, DType::Bool);
  EXPECT_EQ(f.eval({1, 0}), 0);
  f.call("aten::isnan", {"self"}, {x}, DType::Bool);
  EXPECT_EQ(f.eval({kNaN}), 1);
  EXPECT_EQ(f.eval({kInf}), 0);
  f.call("aten::where.self", {"condition", "self", "other"}, {b, x, i}, DType::Float32);
  EXPECT_EQ(f.eval({1, 2.5, 7}), 2.5);
  EXPECT_EQ(f.eval({0, 2.5, 7}), 7);
  EXPECT_TRUE(std::isnan(f.eval({1, kNaN, 7})));
}

TEST(LowerPointwise, IntegerBitwiseOpsAndShiftsInThePromotedType) {
  OneOp f;
  auto u8 = f.in(DType::UInt8), i8 = f.in(DType::Int8), i = f.in(DType::Int64);
  auto b = f.in(DType::Bool);
  f.call("aten::bitwise_not", {"self"}, {u8}, DType::UInt8);
  EXPECT_EQ(f.eval({5}), 250);
  f.call("aten::bitwise_and.Tensor", {"self", "other"}, {u8, i8}, DType::Int16);
  EXPECT_EQ(f.eval({255, -1}), 255);  // u8 & i8 promote to i16
  f.call("aten::bitwise_or.Scalar", {"self", "other"}, {i8, int64_t{-128}}, DType::Int8);
  EXPECT_EQ(f.eval({5}), -123);
  f.call("aten::bitwise_xor.Scalar_Tensor", {"self", "other"}, {true, i}, DType::Int64);
  EXPECT_EQ(f.eval({3}), 2);
  f.call("aten::bitwise_xor.Tensor", {"self", "other"}, {b, b}, DType::Bool);
  EXPECT_EQ(f.eval({1, 1}), 0);
  f.call("aten::bitwise_left_shift.Tensor_Scalar", {"self", "other"}, {i8, int64_t{7}},
         DType::Int8);
  EXPECT_EQ(f.eval({3}), -128);
  f.call("aten::__lshift__.Tensor", {"self", "other"}, {i, i}, DType::Int64);
  EXPECT_EQ(f.eval({3, 64}), 0);
  EXPECT_EQ(f.eval({3, -1}), 0);
  f.call("aten::bitwise_right_shift.Scalar_Tensor", {"self", "other"}, {int64_t{-100}, i8},
         DType::Int8);
  EXPECT_EQ(f.eval({2}), -25);
  EXPECT_EQ(f.eval({9}), -1);
  f.call("aten::__rshift__.Scalar", {"self", "other"}, {u8, int64_t{8}}, DType::UInt8);
  EXPECT_EQ(f.eval({255}), 0);
}

TEST(LowerPointwise, ConversionsCastLikeStaticCast) {
  OneOp f;
  auto x = f.in(DType::Float32);
  std::vector<std::string> names = {"self",       "dtype",        "layout",       "device",
                                    "pin_memory", "non_blocking", "memory_format"};
  auto to = [&](DType t) {
    f.call("aten::_to_copy", names, {x, t, NoneArg{}, NoneArg{}, NoneArg{}, false, NoneArg{}}, t);
  };
  to(DType::Int32);
  EXPECT_EQ(f.eval({-2.75}), -2);
  to(DType::Bool);
  EXPECT_EQ(f.eval({kNaN}), 1);
  EXPECT_EQ(f.eval({-0.0}), 0);
  to(DType::BFloat16);
  EXPECT_EQ(f.eval({1.00390625 + 1e-6}), 1.0078125);
  f.call("aten::clone", {"self", "memory_format"}, {x, NoneArg{}}, DType::Float32);
  EXPECT_EQ(f.lower().kind(), loop::ExprKind::Var);
}

TEST(LowerPointwise, LerpAddcmulAndAddcdiv) {
  OneOp f;
  auto a = f.in(DType::Float32), b = f.in(DType::Float32), c = f.in(DType::Float32);
  f.call("aten::lerp.Scalar", {"self", "end", "weight"}, {a, b, 0.25}, DType::Float32);
  EXPECT_EQ(f.eval({1, 5}), f32(1 + 0.25 * 4));
  EXPECT_TRUE(std::isnan(f.eval({kInf, 5})));
  f.call("aten::lerp.Scalar", {"self", "end", "weight"}, {a, b, 0.75}, DType::Float32);
  EXPECT_EQ(f.eval({1, 5}), f32(5 - 4 * 0.25));
  EXPECT_EQ(f.eval({kInf, 5}), kInf);  // eager: lerp(inf, 5, 0.75) = inf, but 0.25 gives nan
  std::vector<std::string> names = {"self", "tensor1", "tensor2", "value"};
  f.call("aten::addcmul", names, {a, b, c, 0.5}, DType::Float32);
  EXPECT_EQ(f.eval({1, 3, 5}), 8.5);
  f.call("aten::addcdiv", names, {a, b, c, int64_t{2}}, DType::Float32);
  EXPECT_EQ(f.eval({1, 3, 4}), 2.5);
  EXPECT_EQ(f.eval({1, 3, 0}), kInf);
  auto i = f.in(DType::Int64), j = f.in(DType::Int64), k = f.in(DType::Int64);
  f.call("aten::addcmul", names, {i, j, k, int64_t{3}}, DType::Int64);
  EXPECT_EQ(f.eval({1, 2, 5}), 31);
}

}  // namespace
}  // namespace ember::sched
