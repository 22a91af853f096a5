#include "loop/eval.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "support/error.h"

namespace ember::loop {
namespace {

double round_to(DType t, double v) {
  switch (t) {
    case DType::Float64:
      return v;
    case DType::Float32:
      return static_cast<float>(v);
    case DType::BFloat16: {
      float f = static_cast<float>(v);
      if (std::isnan(f)) return f;
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
      bits &= 0xffff0000u;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    default:
      EMBER_UNSUPPORTED(false) << "the loop interpreter does not support " << dtype_name(t);
  }
  return v;
}

}  // namespace

Scalar Scalar::of_int(DType t, int64_t v) {
  return {t, wrap_int(t, static_cast<int64_t>(v)), 0};
}
Scalar Scalar::of_float(DType t, double v) {
  return {t, 0, round_to(t, v)};
}

namespace {

Scalar number(DType t, double f, int64_t i) {
  return is_float(t) ? Scalar::of_float(t, f) : Scalar::of_int(t, i);
}

Scalar binary(ExprKind k, DType t, const Scalar& a, const Scalar& b) {
  bool fl = is_float(a.dtype);
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  auto cmp = [&](bool r) { return Scalar::of_int(DType::Bool, r); };
  switch (k) {
    case ExprKind::Add:
      return fl ? Scalar::of_float(t, a.f + b.f) : Scalar::of_int(t, u(a.i) + u(b.i));
    case ExprKind::Sub:
      return fl ? Scalar::of_float(t, a.f - b.f) : Scalar::of_int(t, u(a.i) - u(b.i));
    case ExprKind::Mul:
      return fl ? Scalar::of_float(t, a.f * b.f) : Scalar::of_int(t, u(a.i) * u(b.i));
    case ExprKind::Div:
      return Scalar::of_float(t, a.f / b.f);
    case ExprKind::FloorDiv:
    case ExprKind::Mod:
      EMBER_CHECK(b.i != 0) << "integer division by zero";
      return Scalar::of_int(t, k == ExprKind::Mod ? mod_i64(a.i, b.i) : floordiv_i64(a.i, b.i));
    case ExprKind::Min:
    case ExprKind::Max: {
      bool want_a =
          k == ExprKind::Min ? (fl ? a.f < b.f : a.i < b.i) : (fl ? a.f > b.f : a.i > b.i);
      if (fl && (std::isnan(a.f) || std::isnan(b.f))) {
        return Scalar::of_float(t, std::numeric_limits<double>::quiet_NaN());
      }
      return want_a ? a : b;
    }
    case ExprKind::LT:
      return cmp(fl ? a.f < b.f : a.i < b.i);
    case ExprKind::LE:
      return cmp(fl ? a.f <= b.f : a.i <= b.i);
    case ExprKind::EQ:
      return cmp(fl ? a.f == b.f : a.i == b.i);
    case ExprKind::NE:
      return cmp(fl ? a.f != b.f : a.i != b.i);
    case ExprKind::And:
      return cmp(a.i && b.i);
    case ExprKind::Or:
      return cmp(a.i || b.i);
    case ExprKind::BitAnd:
      return Scalar::of_int(t, a.i & b.i);
    case ExprKind::BitOr:
      return Scalar::of_int(t, a.i | b.i);
    case ExprKind::BitXor:
      return Scalar::of_int(t, a.i ^ b.i);
    case ExprKind::Shl:
      return Scalar::of_int(t, shl_int(t, a.i, b.i));
    case ExprKind::Shr:
      return Scalar::of_int(t, shr_int(t, a.i, b.i));
    default:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << expr_kind_name(k) << " is not binary";
  return {};
}

Scalar cast(DType t, const Scalar& v) {
  if (t == DType::Bool) return Scalar::of_int(t, is_float(v.dtype) ? v.f != 0 : v.i != 0);
  if (is_float(t)) return Scalar::of_float(t, is_float(v.dtype) ? v.f : static_cast<double>(v.i));
  if (!is_float(v.dtype)) return Scalar::of_int(t, v.i);
  double x = std::trunc(v.f);
  EMBER_CHECK(x >= -9.2e18 && x <= 9.2e18)
      << "cast of " << v.f << " to " << dtype_name(t) << " is out of range";
  return Scalar::of_int(t, static_cast<int64_t>(x));
}

Scalar call(CallFn fn, DType t, const std::vector<Scalar>& args) {
  double x = args[0].f;
  double y = args.size() > 1 ? args[1].f : 0;
  auto r = [&](double v) { return Scalar::of_float(t, v); };
  switch (fn) {
    case CallFn::Abs:
      return number(t, std::fabs(x), args[0].i < 0 ? -args[0].i : args[0].i);
    case CallFn::Neg:
      return number(t, -x, static_cast<int64_t>(0 - static_cast<uint64_t>(args[0].i)));
    case CallFn::Exp:
      return r(std::exp(x));
    case CallFn::Exp2:
      return r(std::exp2(x));
    case CallFn::Expm1:
      return r(std::expm1(x));
    case CallFn::Log:
      return r(std::log(x));
    case CallFn::Log2:
      return r(std::log2(x));
    case CallFn::Log10:
      return r(std::log10(x));
    case CallFn::Log1p:
      return r(std::log1p(x));
    case CallFn::Sqrt:
      return r(std::sqrt(x));
    case CallFn::Rsqrt:
      return r(1 / std::sqrt(x));
    case CallFn::Reciprocal:
      return r(1 / x);
    case CallFn::Sin:
      return r(std::sin(x));
    case CallFn::Cos:
      return r(std::cos(x));
    case CallFn::Tan:
      return r(std::tan(x));
    case CallFn::Asin:
      return r(std::asin(x));
    case CallFn::Acos:
      return r(std::acos(x));
    case CallFn::Atan:
      return r(std::atan(x));
    case CallFn::Sinh:
      return r(std::sinh(x));
    case CallFn::Cosh:
      return r(std::cosh(x));
    case CallFn::Tanh:
      return r(std::tanh(x));
    case CallFn::Asinh:
      return r(std::asinh(x));
    case CallFn::Acosh:
      return r(std::acosh(x));
    case CallFn::Atanh:
      return r(std::atanh(x));
    case CallFn::Erf:
      return r(std::erf(x));
    case CallFn::Erfc:
      return r(std::erfc(x));
    case CallFn::Sigmoid:
      return r(1 / (1 + std::exp(-x)));
    case CallFn::Floor:
      return r(std::floor(x));
    case CallFn::Ceil:
      return r(std::ceil(x));
    case CallFn::Round:
      return r(std::nearbyint(x));
    case CallFn::Trunc:
      return r(std::trunc(x));
    case CallFn::IsNan:
      return Scalar::of_int(DType::Bool, std::isnan(x));
    case CallFn::IsInf:
      return Scalar::of_int(DType::Bool, std::isinf(x));
    case CallFn::Pow:
      return r(std::pow(x, y));
    case CallFn::Atan2:
      return r(std::atan2(x, y));
    case CallFn::Fmod:
      return r(std::fmod(x, y));
    case CallFn::CheckIndex:
      EMBER_CHECK(args[1].i <= args[0].i && args[0].i < args[2].i)
          << "index " << args[0].i << " is out of range [" << args[1].i << ", " << args[2].i << ")";
      return args[0];
  }
  return {};
}

std::vector<Scalar>& buffer(const EvalEnv& env, const std::string& name) {
  EMBER_CHECK(env.buffers != nullptr && env.buffers->count(name)) << "no buffer '" << name << "'";
  return env.buffers->at(name);
}

Scalar& element(const EvalEnv& env, const std::string& name, int64_t index) {
  std::vector<Scalar>& b = buffer(env, name);
  EMBER_CHECK(index >= 0 && index < static_cast<int64_t>(b.size()))
      << "index " << index << " of buffer '" << name << "' is out of bounds [0, " << b.size()
      << ")";
  return b[index];
}

}  // namespace

Scalar eval_expr(const Expr& e, const EvalEnv& env) {
  auto ev = [&](const Expr& x) { return eval_expr(x, env); };
  switch (e.kind()) {
    case ExprKind::IntImm:
      return Scalar::of_int(e.dtype(), e.as<IntImm>()->value);
    case ExprKind::FloatImm:
      return Scalar::of_float(e.dtype(), e.as<FloatImm>()->value);
    case ExprKind::Var: {
      auto it = env.vars.find(e.as<Var>()->name);
      EMBER_CHECK(it != env.vars.end()) << "unbound variable '" << e.as<Var>()->name << "'";
      return it->second;
    }
    case ExprKind::SizeVar: {
      auto it = env.sizes.find(e.as<SizeVar>()->name);
      EMBER_CHECK(it != env.sizes.end()) << "unbound size '" << e.as<SizeVar>()->name << "'";
      return Scalar::of_int(kIndexType, it->second);
    }
#define EMBER_LOOP_BINARY(Name, Symbol, Cat) \
  case ExprKind::Name:                       \
    return binary(e.kind(), e.dtype(), ev(e.as<Name>()->a), ev(e.as<Name>()->b));
#include "loop/nodes.def"
    case ExprKind::Not:
      return Scalar::of_int(DType::Bool, ev(e.as<Not>()->a).i == 0);
    case ExprKind::Select: {
      const auto* s = e.as<Select>();
      return ev(s->cond).i ? ev(s->t) : ev(s->f);
    }
    case ExprKind::Cast:
      return cast(e.dtype(), ev(e.as<Cast>()->value));
    case ExprKind::Load: {
      const auto* l = e.as<Load>();
      return element(env, l->buffer, ev(l->index).i);
    }
    case ExprKind::Call: {
      std::vector<Scalar> args;
      for (const Expr& a : e.as<Call>()->args) args.push_back(ev(a));
      return call(e.as<Call>()->fn, e.dtype(), args);
    }
  }
  return {};
}

namespace {

bool is_nan(const Scalar& s) {
  return is_float(s.dtype) && std::isnan(s.f);
}

/// Whether candidate (v, i) beats the current (v0, i0) of an ArgMax (or ArgMin when `min`).
bool arg_better(bool min, const Scalar& v, int64_t i, const Scalar& v0, int64_t i0) {
  if (is_nan(v0)) return is_nan(v) && i < i0;
  if (is_nan(v)) return true;
  double a = v.as_double(), b = v0.as_double();
  if (is_float(v.dtype) ? a == b : v.i == v0.i) return i < i0;
  if (!is_float(v.dtype)) return min ? v.i < v0.i : v.i > v0.i;
  return min ? a < b : a > b;
}

void accumulate(const Accumulate& n, const EvalEnv& env) {
  int64_t index = eval_expr(n.index, env).i;
  std::vector<Scalar> vals;
  for (const Expr& v : n.values) vals.push_back(eval_expr(v, env));
  std::vector<Scalar*> acc;
  for (const std::string& b : n.buffers) acc.push_back(&element(env, b, index));
  DType t = acc[0]->dtype;
  auto fl = [&](double v) { return Scalar::of_float(t, v); };
  switch (n.op) {
    case ReduceOp::Sum:
      *acc[0] = binary(ExprKind::Add, t, *acc[0], vals[0]);
      return;
    case ReduceOp::Prod:
      *acc[0] = binary(ExprKind::Mul, t, *acc[0], vals[0]);
      return;
    case ReduceOp::Max:
      *acc[0] = binary(ExprKind::Max, t, *acc[0], vals[0]);
      return;
    case ReduceOp::Min:
      *acc[0] = binary(ExprKind::Min, t, *acc[0], vals[0]);
      return;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      if (arg_better(n.op == ReduceOp::ArgMin, vals[0], vals[1].i, *acc[0], acc[1]->i)) {
        *acc[0] = vals[0];
        *acc[1] = vals[1];
      }
      return;
    case ReduceOp::Any:
      acc[0]->i = acc[0]->i || vals[0].i;
      return;
    case ReduceOp::All:
      acc[0]->i = acc[0]->i && vals[0].i;
      return;
    case ReduceOp::WelfordReduce: {
      double x = vals[0].f;
      *acc[2] = fl(acc[2]->f + 1);
      double delta = x - acc[0]->f;
      *acc[0] = fl(acc[0]->f + delta / acc[2]->f);
      *acc[1] = fl(acc[1]->f + delta * (x - acc[0]->f));
      return;
    }
    case ReduceOp::WelfordCombine: {
      double wb = vals[2].f, wa = acc[2]->f;
      if (wb == 0) return;
      double w = wa + wb, delta = vals[0].f - acc[0]->f;
      *acc[0] = fl(acc[0]->f + delta * wb / w);
      *acc[1] = fl(acc[1]->f + vals[1].f + delta * delta * wa * wb / w);
      *acc[2] = fl(w);
      return;
    }
  }
}

}  // namespace

void run_stmt(const Stmt& s, EvalEnv& env) {
  switch (s.kind()) {
    case StmtKind::For: {
      const auto* n = s.as<For>();
      int64_t mn = eval_expr(n->min, env).i, ext = eval_expr(n->extent, env).i;
      const std::string& name = n->var.as<Var>()->name;
      for (int64_t i = mn; i < mn + ext; ++i) {
        env.vars[name] = Scalar::of_int(kIndexType, i);
        run_stmt(n->body, env);
      }
      env.vars.erase(name);
      return;
    }
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) run_stmt(c, env);
      return;
    case StmtKind::Store: {
      const auto* n = s.as<Store>();
      int64_t index = eval_expr(n->index, env).i;
      Scalar v = eval_expr(n->value, env);
      element(env, n->buffer, index) = v;
      return;
    }
    case StmtKind::Accumulate:
      accumulate(*s.as<Accumulate>(), env);
      return;
    case StmtKind::Let: {
      const auto* n = s.as<Let>();
      const std::string& name = n->var.as<Var>()->name;
      env.vars[name] = eval_expr(n->value, env);
      run_stmt(n->body, env);
      env.vars.erase(name);
      return;
    }
    case StmtKind::IfThenElse: {
      const auto* n = s.as<IfThenElse>();
      if (eval_expr(n->cond, env).i) {
        run_stmt(n->then_case, env);
      } else if (n->else_case.defined()) {
        run_stmt(n->else_case, env);
      }
      return;
    }
    case StmtKind::Allocate: {
      const auto* n = s.as<Allocate>();
      int64_t count = 1;
      for (const Expr& e : n->sizes) count *= std::max<int64_t>(0, eval_expr(e, env).i);
      (*env.buffers)[n->buffer] = std::vector<Scalar>(count, number(n->dtype, 0, 0));
      run_stmt(n->body, env);
      env.buffers->erase(n->buffer);
      return;
    }
  }
}

void run_kernel(const Kernel& k, const Bindings& sizes, BufferMap& buffers) {
  EvalEnv env;
  env.sizes = sizes;
  env.buffers = &buffers;
  for (const std::string& s : k.size_vars) {
    EMBER_CHECK(sizes.count(s)) << "kernel '" << k.name << "' needs a value for size " << s;
  }
  for (const BufferParam& b : k.buffers) {
    if (buffers.count(b.name)) continue;
    EMBER_CHECK(b.role == BufferRole::Output || b.role == BufferRole::Temp)
        << "kernel '" << k.name << "' needs buffer '" << b.name << "'";
    int64_t extent = 1;
    for (size_t d = 0; d < b.sizes.size() && d < b.strides.size(); ++d) {
      int64_t n = eval_expr(b.sizes[d], env).i, stride = eval_expr(b.strides[d], env).i;
      if (n == 0) extent = 0;
      if (extent > 0) extent += (n - 1) * stride;
    }
    buffers[b.name] = std::vector<Scalar>(extent, number(b.dtype, 0, 0));
  }
  run_stmt(k.body, env);
}

}  // namespace ember::loop
