// The rule table of the pointwise lowering: one entry per supported ATen overload, each a small
// lowering function over operands already converted to the computation type (see
// pointwise_internal.h). Formulas follow ATen's CPU kernels operation for operation.
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <variant>

#include "sched/pointwise_internal.h"

namespace ember::sched::detail {
namespace {

using graph::OpKind;
using loop::CallFn;

// <cmath>'s M_SQRT2, M_2_SQRTPI and M_SQRT1_2 (not in strict ISO C++), as ATen's GELU uses them.
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2SqrtPi = 1.12837916709551257390;
constexpr double kSqrt1_2 = 0.70710678118654752440;

// ---- lowering helpers --------------------------------------------------------------------------

Expr call(CallFn f, Expr a) {
  return loop::Call::make(f, {std::move(a)});
}
Expr div(Expr a, Expr b) {
  return loop::Div::make(std::move(a), std::move(b));
}
Expr select(Expr c, Expr t, Expr f) {
  return loop::Select::make(std::move(c), std::move(t), std::move(f));
}
Expr lt(Expr a, Expr b) {
  return loop::LT::make(std::move(a), std::move(b));
}
Expr le(Expr a, Expr b) {
  return loop::LE::make(std::move(a), std::move(b));
}

/// Python-style floor division of floats, as ATen's div_floor_floating.
Expr floor_divide(const Plan& p, Expr a, Expr b) {
  DType t = p.comp;
  Expr zero = fconst(t, 0), one = fconst(t, 1);
  Expr q = div(a, b);
  Expr mod = loop::Call::make(CallFn::Fmod, {a, b});
  Expr d0 = div(a - mod, b);
  Expr adjust =
      loop::And::make(loop::NE::make(mod, zero), loop::NE::make(lt(b, zero), lt(mod, zero)));
  Expr d = select(adjust, d0 - one, d0);
  Expr fl = call(CallFn::Floor, d);
  Expr rounded = select(lt(fconst(t, 0.5), d - fl), fl + one, fl);
  // copysign(0, q): q is negative, or a negative zero (1 / q < 0).
  Expr negative =
      loop::Or::make(lt(q, zero), loop::And::make(loop::EQ::make(q, zero), lt(div(one, q), zero)));
  Expr signed_zero = select(negative, fconst(t, -0.0), zero);
  return select(loop::EQ::make(b, zero), q, select(loop::NE::make(d, zero), rounded, signed_zero));
}

/// min(max(x, lo), hi) as std::min/std::max: NaN and the sign of a zero x are kept.
Expr clamp(const Plan& p, Expr x, const char* lo, const char* hi) {
  if (lo && !is_none(p.arg(lo))) {
    Expr l = p.rounded_param(lo);
    x = select(lt(x, l), l, x);
  }
  if (hi && !is_none(p.arg(hi))) {
    Expr h = p.rounded_param(hi);
    x = select(lt(h, x), h, x);
  }
  return x;
}

Expr pow_scalar(const Plan& p, Expr x) {
  double e = *number(p.arg("exponent"));
  DType t = p.comp;
  bool bf16 = p.out == DType::BFloat16, f16 = p.out == DType::Float16;
  // The CPU kernel of bf16 rounds after each multiplication of these expansions.
  auto rnd = [&](Expr v) { return bf16 ? cast(t, cast(p.out, v)) : v; };
  if (e == 0) return fconst(t, 1);
  if (e == 1) return x;
  if (e == 0.5 && !f16) return call(CallFn::Sqrt, x);
  if (e == -0.5 && !f16) return call(CallFn::Rsqrt, x);
  if (e == -1 && !f16) return call(CallFn::Reciprocal, x);
  if (e == 2) return x * x;
  if (e == 3) return rnd(x * x) * x;
  if (e == -2) return div(fconst(t, 1), rnd(x * x));
  return loop::Call::make(CallFn::Pow, {x, p.param("exponent")});
}

// ---- checks ------------------------------------------------------------------------------------

bool alpha_ok(const Plan& p) {
  // bf16/f16 eager rounds alpha * other before the addition; only alpha == 1 is exact here.
  return p.scalar_ok("alpha") && (!is_reduced(p.out) || p.is_one("alpha"));
}

// An integer floor division by a nonzero constant (index arithmetic: a max pool's window offsets,
// rewrite/pool_offsets.h): FloorDiv, Python's //, as ATen's div_floor_integer.
bool int_floor_by_constant(const Plan& p) {
  const Arg* mode = p.arg("rounding_mode");
  const auto* s = is_none(mode) ? nullptr : std::get_if<std::string>(mode);
  if (s == nullptr || *s != "floor" || p.operands.size() < 2 || p.operands[1].tensor ||
      (p.out != DType::Int64 && p.out != DType::Int32)) {
    return false;
  }
  std::optional<double> b = number(p.arg("other"));
  return b.has_value() && *b != 0 && *b == std::floor(*b);
}

bool div_mode_ok(const Plan& p) {
  const Arg* mode = p.arg("rounding_mode");
  if (is_none(mode)) return loop::is_float(p.out);
  if (int_floor_by_constant(p)) return true;
  const auto* s = std::get_if<std::string>(mode);
  // Other integer floor/trunc divisions and the bf16/f16 kernels (which round a / b first) are
  // left to ATen.
  return s && (*s == "trunc" || *s == "floor") &&
         (p.out == DType::Float32 || p.out == DType::Float64);
}

bool bound_ok(const Plan& p, const char* name) {
  const Arg* a = p.arg(name);
  return is_none(a) || (p.scalar_ok(name) && !std::isnan(*number(a)));
}

bool clamp_ok(const Plan& p) {
  return bound_ok(p, "min") && bound_ok(p, "max") &&
         !(is_none(p.arg("min")) && is_none(p.arg("max")));
}

/// A dtype conversion that changes nothing but the dtype (and maybe strides).
bool conversion_ok(const Plan& p) {
  if (!p.operands[0].tensor) return false;
  graph::DType in = p.g.type(std::get<graph::ValueRef>(*p.arg("self")).id).dtype;
  graph::DType out = p.g.type(p.n.outputs[0]).dtype;
  const Arg* dtype = p.arg("dtype");
  if (!(dtype && (is_none(dtype) || arg_is(dtype, out)))) return false;
  if (is_none(dtype) && in != out) return false;
  const Arg* layout = p.arg("layout");
  if (layout && !is_none(layout) && !arg_is(layout, graph::Layout::Strided)) return false;
  const Arg* device = p.arg("device");
  graph::Device in_device = p.g.type(std::get<graph::ValueRef>(*p.arg("self")).id).device;
  if (device && !is_none(device) && !arg_is(device, in_device)) return false;
  const Arg* pin = p.arg("pin_memory");
  if (pin && !is_none(pin) && !arg_is(pin, false)) return false;
  // Any memory format: the kernel writes the output at its traced strides, which are the
  // format's (a copy to channels-last is a kernel like any other).
  const Arg* mf = p.arg("memory_format");
  if (mf && !is_none(mf) && !std::holds_alternative<graph::MemoryFormat>(*mf)) return false;
  // aten::to returns `self` itself (an alias) when nothing changes and copy is false.
  const Arg* copy = p.arg("copy");
  if (copy && !arg_is(copy, true) && in == out) return false;
  return true;
}

// ---- the table ---------------------------------------------------------------------------------

Rule unary_call(Mode m, CallFn f) {
  return {m, {"self"}, [f](const Plan&, const std::vector<Expr>& x) { return call(f, x[0]); }};
}

/// floor, ceil, round, trunc: the identity on integers.
Rule rounding(CallFn f) {
  return {Mode::Numeric, {"self"}, [f](const Plan& p, const std::vector<Expr>& x) {
            return loop::is_float(p.comp) ? call(f, x[0]) : x[0];
          }};
}

Rule compare(loop::ExprKind k, bool swap, bool scalar) {
  return {Mode::Compare,
          {"self", "other"},
          [k, swap](const Plan&, const std::vector<Expr>& x) {
            return swap ? loop::make_binary(k, x[1], x[0]) : loop::make_binary(k, x[0], x[1]);
          },
          [scalar](const Plan& p) { return p.operands[1].tensor != scalar; }};
}

}  // namespace

const std::map<graph::OpOverload, Rule>& rule_table() {
  using V = const std::vector<Expr>&;
  using P = const Plan&;
  static const std::map<graph::OpOverload, Rule> table = [] {
    std::map<graph::OpOverload, Rule> t;
    auto add = [](P p, V x) {
      return p.is_one("alpha") ? x[0] + x[1] : x[0] + p.param("alpha") * x[1];
    };
    auto sub = [](P p, V x) {
      return p.is_one("alpha") ? x[0] - x[1] : x[0] - p.param("alpha") * x[1];
    };
    auto rsub = [](P p, V x) {  // other - alpha * self
      return p.is_one("alpha") ? x[1] - x[0] : x[1] - p.param("alpha") * x[0];
    };
    auto mul = [](P, V x) { return x[0] * x[1]; };
    // CUDA's div_true_kernel computes `a / b` with a CPU scalar b (a Python number or a 0-dim CPU
    // tensor) as a * (1 / b), the reciprocal in the compute type: one bit of precision apart, and
    // T5's relative position buckets (log ratios truncated to integers) depend on it.
    auto true_div = [](P p, V x) {
      if (p.cuda && loop::is_float(p.comp) && p.operands.size() == 2 && p.operands[1].cpu_scalar) {
        return x[0] * div(fconst(p.comp, 1), x[1]);
      }
      return div(x[0], x[1]);
    };
    auto div_mode = [](P p, V x) {
      const Arg* mode = p.arg("rounding_mode");
      if (is_none(mode)) return div(x[0], x[1]);
      if (std::get<std::string>(*mode) == "trunc") return call(CallFn::Trunc, div(x[0], x[1]));
      if (int_floor_by_constant(p)) return loop::FloorDiv::make(x[0], x[1]);
      return floor_divide(p, x[0], x[1]);
    };
    auto other_scalar = [](P p) { return !p.operands[1].tensor; };
    t[{OpKind::add, "Tensor"}] = {Mode::Numeric, {"self", "other"}, add, alpha_ok};
    t[{OpKind::add, "Scalar"}] = {
        Mode::Numeric, {"self", "other"}, add, [=](P p) { return other_scalar(p) && alpha_ok(p); }};
    t[{OpKind::sub, "Tensor"}] = {Mode::Numeric, {"self", "other"}, sub, alpha_ok};
    t[{OpKind::sub, "Scalar"}] = {
        Mode::Numeric, {"self", "other"}, sub, [=](P p) { return other_scalar(p) && alpha_ok(p); }};
    t[{OpKind::rsub, "Tensor"}] = {Mode::Numeric, {"self", "other"}, rsub, alpha_ok};
    t[{OpKind::rsub, "Scalar"}] = {Mode::Numeric, {"self", "other"}, rsub, [=](P p) {
                                     return other_scalar(p) && alpha_ok(p);
                                   }};
    t[{OpKind::mul, "Tensor"}] = {Mode::Numeric, {"self", "other"}, mul, {}, true};
    t[{OpKind::mul, "Scalar"}] = {Mode::Numeric, {"self", "other"}, mul, other_scalar, true};
    t[{OpKind::div, "Tensor"}] = {Mode::Float, {"self", "other"}, true_div, {}, true};
    t[{OpKind::div, "Scalar"}] = {Mode::Float, {"self", "other"}, true_div, other_scalar, true};
    t[{OpKind::div, "Tensor_mode"}] = {
        Mode::Numeric, {"self", "other"}, div_mode, div_mode_ok, true};
    t[{OpKind::div, "Scalar_mode"}] = {Mode::Numeric,
                                       {"self", "other"},
                                       div_mode,
                                       [=](P p) { return other_scalar(p) && div_mode_ok(p); },
                                       true};

    // clang-format off
    const std::pair<OpKind, CallFn> float_calls[] = {
        {OpKind::exp, CallFn::Exp},                {OpKind::exp2, CallFn::Exp2},
        {OpKind::expm1, CallFn::Expm1},            {OpKind::log, CallFn::Log},
        {OpKind::log2, CallFn::Log2},              {OpKind::log10, CallFn::Log10},
        {OpKind::log1p, CallFn::Log1p},            {OpKind::sqrt, CallFn::Sqrt},
        {OpKind::rsqrt, CallFn::Rsqrt},            {OpKind::sin, CallFn::Sin},
        {OpKind::cos, CallFn::Cos},                {OpKind::tan, CallFn::Tan},
        {OpKind::asin, CallFn::Asin},              {OpKind::acos, CallFn::Acos},
        {OpKind::atan, CallFn::Atan},              {OpKind::sinh, CallFn::Sinh},
        {OpKind::cosh, CallFn::Cosh},              {OpKind::tanh, CallFn::Tanh},
        {OpKind::asinh, CallFn::Asinh},            {OpKind::acosh, CallFn::Acosh},
        {OpKind::atanh, CallFn::Atanh},            {OpKind::erf, CallFn::Erf},
        {OpKind::erfc, CallFn::Erfc},              {OpKind::sigmoid, CallFn::Sigmoid},
        {OpKind::reciprocal, CallFn::Reciprocal}};
    // clang-format on
    for (const auto& [kind, fn] : float_calls) t[{kind, ""}] = unary_call(Mode::Float, fn);
    t[{OpKind::neg, ""}] = unary_call(Mode::Numeric, CallFn::Neg);
    t[{OpKind::abs, ""}] = unary_call(Mode::Numeric, CallFn::Abs);
    t[{OpKind::floor, ""}] = rounding(CallFn::Floor);
    t[{OpKind::ceil, ""}] = rounding(CallFn::Ceil);
    t[{OpKind::round, ""}] = rounding(CallFn::Round);
    t[{OpKind::trunc, ""}] = rounding(CallFn::Trunc);
    t[{OpKind::sign, ""}] = {Mode::Numeric, {"self"}, [](P p, V x) {
                               Expr zero = num(p.comp, 0);
                               return cast(p.comp, lt(zero, x[0])) - cast(p.comp, lt(x[0], zero));
                             }};

    t[{OpKind::pow, "Tensor_Scalar"}] = {Mode::Float,
                                         {"self"},
                                         [](P p, V x) { return pow_scalar(p, x[0]); },
                                         [](P p) { return p.scalar_ok("exponent"); }};
    // A Python number to a tensor's power (Adam's bias corrections: beta ** step), float only.
    // The number is converted to the result's dtype first, as TensorIterator does a wrapped
    // scalar (0.9 is 0.8984375 in bf16).
    t[{OpKind::pow, "Scalar"}] = {
        Mode::Float,
        {"exponent"},
        [](P p, V x) {
          return loop::Call::make(CallFn::Pow, {p.rounded_param("self"), x[0]});
        },
        [](P p) { return loop::is_float(p.out) && p.scalar_ok("self"); }};
    t[{OpKind::pow, "Tensor_Tensor"}] = {Mode::Float, {"self", "exponent"}, [](P, V x) {
                                           return loop::Call::make(CallFn::Pow, {x[0], x[1]});
                                         }};
    t[{OpKind::maximum, ""}] = {
        Mode::Numeric, {"self", "other"}, [](P, V x) { return loop::max(x[0], x[1]); }};
    t[{OpKind::minimum, ""}] = {
        Mode::Numeric, {"self", "other"}, [](P, V x) { return loop::min(x[0], x[1]); }};
    t[{OpKind::clamp, ""}] = {
        Mode::Numeric, {"self"}, [](P p, V x) { return clamp(p, x[0], "min", "max"); }, clamp_ok};
    t[{OpKind::clamp_min, ""}] = {Mode::Numeric,
                                  {"self"},
                                  [](P p, V x) { return clamp(p, x[0], "min", nullptr); },
                                  [](P p) { return bound_ok(p, "min") && !is_none(p.arg("min")); }};
    t[{OpKind::clamp_max, ""}] = {Mode::Numeric,
                                  {"self"},
                                  [](P p, V x) { return clamp(p, x[0], nullptr, "max"); },
                                  [](P p) { return bound_ok(p, "max") && !is_none(p.arg("max")); }};
    t[{OpKind::hardtanh, ""}] = {Mode::Float,
                                 {"self"},
                                 [](P p, V x) { return clamp(p, x[0], "min_val", "max_val"); },
                                 [](P p) {
                                   return p.scalar_ok("min_val") && p.scalar_ok("max_val") &&
                                          bound_ok(p, "min_val") && bound_ok(p, "max_val");
                                 }};
    t[{OpKind::relu, ""}] = {Mode::Numeric, {"self"}, [](P p, V x) {
                               Expr zero = num(p.comp, 0);
                               return select(lt(x[0], zero), zero, x[0]);
                             }};
    t[{OpKind::threshold, ""}] = {
        Mode::Numeric,
        {"self"},
        [](P p, V x) {
          return select(le(x[0], p.rounded_param("threshold")), p.rounded_param("value"), x[0]);
        },
        [](P p) { return p.scalar_ok("threshold") && p.scalar_ok("value"); }};
    t[{OpKind::leaky_relu, ""}] = {Mode::Float,
                                   {"self"},
                                   [](P p, V x) {
                                     return select(lt(num(p.comp, 0), x[0]), x[0],
                                                   x[0] * p.param("negative_slope"));
                                   },
                                   [](P p) { return p.scalar_ok("negative_slope"); }};
    t[{OpKind::elu, ""}] = {
        Mode::Float,
        {"self"},
        [](P p, V x) {
          Expr negcoef = p.param("alpha") * p.param("scale");
          Expr neg = call(CallFn::Expm1, x[0] * p.param("input_scale")) * negcoef;
          return select(le(x[0], num(p.comp, 0)), neg, x[0] * p.param("scale"));
        },
        [](P p) {
          return p.scalar_ok("alpha") && p.scalar_ok("scale") && p.scalar_ok("input_scale");
        }};
    t[{OpKind::softplus, ""}] = {
        Mode::Float,
        {"self"},
        [](P p, V x) {
          Expr beta = p.param("beta"), xb = x[0] * beta;
          Expr soft = div(call(CallFn::Log1p, call(CallFn::Exp, xb)), beta);
          return select(lt(p.param("threshold"), xb), x[0], soft);
        },
        [](P p) { return p.scalar_ok("beta") && p.scalar_ok("threshold"); }};
    t[{OpKind::gelu, ""}] = {Mode::Float,
                             {"self"},
                             [](P p, V x) {
                               DType c = p.comp;
                               Expr one = fconst(c, 1), half = fconst(c, 0.5);
                               if (std::get<std::string>(*p.arg("approximate")) == "none") {
                                 return x[0] * half *
                                        (one + call(CallFn::Erf, x[0] * fconst(c, kSqrt1_2)));
                               }
                               Expr inner = fconst(c, kSqrt2 * k2SqrtPi * 0.5) *
                                            (x[0] + fconst(c, 0.044715) * (x[0] * x[0] * x[0]));
                               return half * x[0] * (one + call(CallFn::Tanh, inner));
                             },
                             [](P p) {
                               return arg_is(p.arg("approximate"), std::string("none")) ||
                                      arg_is(p.arg("approximate"), std::string("tanh"));
                             }};
    t[{OpKind::silu, ""}] = {
        Mode::Float, {"self"}, [](P p, V x) {
          return div(x[0], fconst(p.comp, 1) + call(CallFn::Exp, call(CallFn::Neg, x[0])));
        }};
    t[{OpKind::mish, ""}] = {Mode::Float, {"self"}, [](P, V x) {
                               return x[0] * call(CallFn::Tanh,
                                                  call(CallFn::Log1p, call(CallFn::Exp, x[0])));
                             }};
    auto relu6_of_x_plus_3 = [](P p, const Expr& x) {
      return loop::min(loop::max(x + fconst(p.comp, 3), fconst(p.comp, 0)), fconst(p.comp, 6));
    };
    t[{OpKind::hardsigmoid, ""}] = {Mode::Float, {"self"}, [=](P p, V x) {
                                      return div(relu6_of_x_plus_3(p, x[0]), fconst(p.comp, 6));
                                    }};
    t[{OpKind::hardswish, ""}] = {Mode::Float, {"self"}, [=](P p, V x) {
                                    return div(x[0] * relu6_of_x_plus_3(p, x[0]),
                                               fconst(p.comp, 6));
                                  }};

    using K = loop::ExprKind;
    const std::tuple<OpKind, K, bool> comparisons[] = {
        {OpKind::eq, K::EQ, false}, {OpKind::ne, K::NE, false}, {OpKind::lt, K::LT, false},
        {OpKind::le, K::LE, false}, {OpKind::gt, K::LT, true},  {OpKind::ge, K::LE, true}};
    for (const auto& [op, kind, swap] : comparisons) {
      t[{op, "Tensor"}] = compare(kind, swap, false);
      t[{op, "Scalar"}] = compare(kind, swap, true);
    }
    t[{OpKind::logical_not, ""}] = {
        Mode::Logical, {"self"}, [](P, V x) { return loop::Not::make(x[0]); }};
    t[{OpKind::logical_and, ""}] = {
        Mode::Logical, {"self", "other"}, [](P, V x) { return loop::And::make(x[0], x[1]); }};
    t[{OpKind::logical_or, ""}] = {
        Mode::Logical, {"self", "other"}, [](P, V x) { return loop::Or::make(x[0], x[1]); }};
    t[{OpKind::logical_xor, ""}] = {
        Mode::Logical, {"self", "other"}, [](P, V x) { return loop::NE::make(x[0], x[1]); }};
    // Bitwise ops in the output (promoted) type: of booleans the logical ones, of integers the
    // loop IR's, whose shifts follow eager's CPU kernels (loop::Shl, loop::Shr). Eager rejects
    // floats, and shifts of booleans. Scalars must fit the output type (no overflow question).
    auto bits_ok = [](bool shift) {
      return [shift](P p) {
        if (!loop::is_int(p.out) && (shift || p.out != DType::Bool)) return false;
        for (const Operand& o : p.operands) {
          if (loop::is_float(o.dtype)) return false;
          const auto* i = o.tensor ? nullptr : std::get_if<int64_t>(o.scalar);
          if (i != nullptr && !loop::int_fits(p.out, *i)) return false;
        }
        return true;
      };
    };
    auto bitwise = [bits_ok](K int_kind, K bool_kind, bool shift) {
      return Rule{Mode::Raw,
                  {"self", "other"},
                  [=](P p, V x) {
                    Expr a = cast(p.out, x[0]), b = cast(p.out, x[1]);
                    return loop::make_binary(p.out == DType::Bool ? bool_kind : int_kind, a, b);
                  },
                  bits_ok(shift)};
    };
    const std::tuple<OpKind, OpKind, K, K, bool> bitwise_ops[] = {
        {OpKind::bitwise_and, OpKind::__and__, K::BitAnd, K::And, false},
        {OpKind::bitwise_or, OpKind::__or__, K::BitOr, K::Or, false},
        {OpKind::bitwise_xor, OpKind::__xor__, K::BitXor, K::NE, false},
        {OpKind::bitwise_left_shift, OpKind::__lshift__, K::Shl, K::Shl, true},
        {OpKind::bitwise_right_shift, OpKind::__rshift__, K::Shr, K::Shr, true}};
    for (const auto& [op, dunder, int_kind, bool_kind, shift] : bitwise_ops) {
      const Rule rule = bitwise(int_kind, bool_kind, shift);
      t[{op, "Tensor"}] = rule;
      t[{op, shift ? "Tensor_Scalar" : "Scalar"}] = rule;
      t[{op, "Scalar_Tensor"}] = rule;
      t[{dunder, "Tensor"}] = rule;
      t[{dunder, "Scalar"}] = rule;
    }
    t[{OpKind::bitwise_not, ""}] = {
        Mode::Raw,
        {"self"},
        [](P p, V x) {
          if (p.out == DType::Bool) return loop::Not::make(x[0]);
          Expr ones = loop::IntImm::make(p.out, loop::wrap_int(p.out, -1));
          return loop::BitXor::make(x[0], ones);
        },
        [](P p) {
          return p.operands[0].dtype == p.out && (loop::is_int(p.out) || p.out == DType::Bool);
        }};
    t[{OpKind::isnan, ""}] = {Mode::Raw,
                              {"self"},
                              [](P, V x) {
                                return loop::is_float(x[0].dtype()) ? call(CallFn::IsNan, x[0])
                                                                    : loop::bool_imm(false);
                              },
                              [](P p) { return p.out == DType::Bool; }};
    t[{OpKind::where, "self"}] = {Mode::Where, {"condition", "self", "other"}, [](P, V x) {
                                    return select(x[0], x[1], x[2]);
                                  }};
    // masked_fill(self, mask, value): value where the b8 mask is set, else self, broadcast
    // together (the out-of-place op expands both); the value is converted to self's dtype as
    // masked_fill_ converts it (a Scalar's to<T>(), or a 0-dim tensor's item()). For integer
    // and bool outputs only integer and bool values that fit (eager raises on others).
    auto fill_ok = [](P p) {
      return p.operands[0].dtype == p.out && p.operands[1].dtype == DType::Bool;
    };
    t[{OpKind::masked_fill, "Scalar"}] = {
        Mode::Raw,
        {"self", "mask"},
        [](P p, V x) { return select(x[1], constant(p.out, *p.arg("value")), x[0]); },
        [fill_ok](P p) {
          const Arg* v = p.arg("value");
          if (!fill_ok(p) || v == nullptr) return false;
          if (loop::is_float(p.out))
            return number(v).has_value() || std::holds_alternative<bool>(*v);
          if (const auto* i = std::get_if<int64_t>(v)) return loop::int_fits(p.out, *i);
          return std::holds_alternative<bool>(*v);
        }};
    t[{OpKind::masked_fill, "Tensor"}] = {
        Mode::Raw,
        {"self", "mask", "value"},
        [](P p, V x) { return select(x[1], cast(p.out, x[2]), x[0]); },
        [fill_ok](P p) {
          // Float into float only (item() of an integer or bool value is exact there).
          return fill_ok(p) && p.operands[2].zero_dim && loop::is_float(p.out);
        }};

    auto convert_to = [](P p, V x) { return cast(p.out, x[0]); };
    for (const graph::OpOverload& op :
         {graph::OpOverload{OpKind::_to_copy, ""}, graph::OpOverload{OpKind::to, "dtype"},
          graph::OpOverload{OpKind::to, "dtype_layout"}, graph::OpOverload{OpKind::to, "device"}}) {
      t[op] = {Mode::Raw, {"self"}, convert_to, conversion_ok};
    }
    t[{OpKind::clone, ""}] = {
        Mode::Raw,
        {"self"},
        [](P, V x) { return x[0]; },
        [](P p) {
          const Arg* mf = p.arg("memory_format");
          return p.operands[0].dtype == p.out &&
                 (is_none(mf) || std::holds_alternative<graph::MemoryFormat>(*mf));
        }};

    t[{OpKind::lerp, "Scalar"}] = {Mode::Float,
                                   {"self", "end"},
                                   [](P p, V x) {
                                     Expr w = p.param("weight"), one = fconst(p.comp, 1);
                                     double wv = p.comp == DType::Float64
                                                     ? *number(p.arg("weight"))
                                                     : static_cast<float>(*number(p.arg("weight")));
                                     if (std::abs(wv) < 0.5) return x[0] + w * (x[1] - x[0]);
                                     return x[1] - (x[1] - x[0]) * (one - w);
                                   },
                                   [](P p) { return p.scalar_ok("weight"); }};
    t[{OpKind::addcmul, ""}] = {Mode::Numeric,
                                {"self", "tensor1", "tensor2"},
                                [](P p, V x) {
                                  Expr prod = p.is_one("value") ? x[1] : p.param("value") * x[1];
                                  return x[0] + prod * x[2];
                                },
                                [](P p) { return p.scalar_ok("value"); }};
    t[{OpKind::addcdiv, ""}] = {Mode::Float,
                                {"self", "tensor1", "tensor2"},
                                [](P p, V x) {
                                  Expr num = p.is_one("value") ? x[1] : p.param("value") * x[1];
                                  return x[0] + div(num, x[2]);
                                },
                                [](P p) {
                                  // Eager rejects integer division in addcdiv.
                                  return p.scalar_ok("value") &&
                                         loop::is_float(p.operands[1].dtype) &&
                                         loop::is_float(p.operands[2].dtype);
                                }};
    return t;
  }();
  return table;
}

}  // namespace ember::sched::detail
