#include "sched/pointwise.h"

#include <cstdint>
#include <optional>
#include <variant>

#include "sched/pointwise_internal.h"
#include "support/error.h"
#include "sym/range.h"

namespace ember::sched {
namespace detail {

bool is_reduced(DType t) {
  return t == DType::BFloat16 || t == DType::Float16;
}

std::optional<double> number(const Arg* a) {
  if (a == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(a)) return *d;
  return std::nullopt;
}
bool is_none(const Arg* a) {
  return a != nullptr && std::holds_alternative<graph::NoneArg>(*a);
}

Expr cast(DType t, Expr e) {
  return e.dtype() == t ? e : loop::Cast::make(t, std::move(e));
}

/// The float constant `v` of float type `t`, rounded as c10 converts a double (via float).
Expr fconst(DType t, double v) {
  if (t == DType::Float64 || t == DType::Float32) return loop::FloatImm::make(t, v);
  return loop::Cast::make(t, loop::FloatImm::make(DType::Float32, v));
}
/// The small integral constant `v` in numeric type `t`.
Expr num(DType t, double v) {
  return loop::is_float(t) ? fconst(t, v) : loop::IntImm::make(t, static_cast<int64_t>(v));
}
/// Scalar argument `a` (bool, int or double) as an element of its own type: b8, i64 or f64.
Expr scalar_expr(const Arg& a) {
  if (const auto* b = std::get_if<bool>(&a)) return loop::bool_imm(*b);
  if (const auto* i = std::get_if<int64_t>(&a)) return loop::IntImm::make(DType::Int64, *i);
  return loop::FloatImm::make(DType::Float64, std::get<double>(a));
}
/// Scalar argument `a` converted like `Scalar::to<t>()`.
Expr constant(DType t, const Arg& a) {
  if (const auto* d = std::get_if<double>(&a)) return fconst(t, *d);
  return cast(t, scalar_expr(a));
}

}  // namespace detail

namespace {

using namespace detail;  // NOLINT(build/namespaces)

/// torch.promote_types, for the dtypes the loop IR has.
DType promote(DType a, DType b) {
  if (a == b || b == DType::Bool) return a;
  if (a == DType::Bool) return b;
  if (loop::is_float(a) != loop::is_float(b)) return loop::is_float(a) ? a : b;
  if (loop::is_float(a)) {  // two different float types
    if (is_reduced(a) && is_reduced(b)) return DType::Float32;
    return loop::dtype_bits(a) >= loop::dtype_bits(b) ? a : b;
  }
  if (a == DType::UInt8 || b == DType::UInt8) {  // u8 and a signed type
    DType s = a == DType::UInt8 ? b : a;
    return s == DType::Int8 ? DType::Int16 : s;
  }
  return loop::dtype_bits(a) >= loop::dtype_bits(b) ? a : b;
}

/// c10's ResultTypeState: operands promote within their priority class (tensors with dimensions,
/// 0-dim tensors, wrapped numbers); a lower class counts only when it is of a higher category.
struct TypeState {
  std::optional<DType> dim, zero, wrapped;

  static void add(std::optional<DType>& s, DType t) { s = s ? promote(*s, t) : t; }
  static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher || !lower) return higher ? higher : lower;
    if (loop::is_float(*higher)) return higher;
    if (*higher == DType::Bool || loop::is_float(*lower)) return promote(*higher, *lower);
    return higher;
  }
  /// A wrapped float takes the default dtype, assumed f32.
  void add_wrapped(DType t) { add(wrapped, loop::is_float(t) ? DType::Float32 : t); }
  std::optional<DType> result() const { return combine(dim, combine(zero, wrapped)); }
};

/// The operand's element converted to comp, as eager's CPU TensorIterator does it.
Expr convert(const Plan& p, size_t i, Expr e) {
  Mode m = p.rule.mode;
  if (m == Mode::Raw || (m == Mode::Where && i == 0)) return e;
  const Operand& o = p.operands[i];
  if ((m == Mode::Float || m == Mode::Numeric) && is_reduced(p.out) && o.dtype != p.out &&
      !(p.rule.opmath_other && i == 1 && o.one_element) && !(p.cuda && o.cpu_scalar)) {
    e = cast(p.out, e);  // the CPU casts operands to the common (output) type first
  }
  return cast(p.comp, e);
}

std::optional<Plan> plan_node(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return std::nullopt;
  const graph::OpInfo& op = g.ops[n.op];
  auto it = rule_table().find(graph::OpOverload{op.kind, op.overload});
  if (it == rule_table().end() || n.outputs.size() != 1 || op.returns_list ||
      n.args.size() != op.arg_names.size()) {
    return std::nullopt;
  }
  const Rule& rule = it->second;
  std::optional<DType> out = to_loop_dtype(g.type(n.outputs[0]).dtype);
  if (!out) return std::nullopt;
  Plan p{g, n, op, rule, *out, *out, {}};

  // Every tensor argument must be an operand, in argument order.
  std::vector<int> input_of(n.args.size(), -1);
  int num_inputs = 0, num_tensor_operands = 0;
  for (size_t i = 0; i < n.args.size(); ++i) {
    if (std::holds_alternative<graph::ValueList>(n.args[i])) return std::nullopt;
    if (std::holds_alternative<graph::ValueRef>(n.args[i])) input_of[i] = num_inputs++;
  }
  for (const std::string& name : rule.operands) {
    const Arg* a = p.arg(name);
    if (a == nullptr) return std::nullopt;
    Operand o;
    if (const auto* v = std::get_if<graph::ValueRef>(a)) {
      const graph::TensorType& t = g.type(v->id);
      std::optional<DType> dt = to_loop_dtype(t.dtype);
      if (!dt) return std::nullopt;
      o.dtype = *dt;
      o.zero_dim = t.dim() == 0;
      if (graph::all_constant(t.sizes)) {
        o.one_element = graph::numel(t.sizes) == 1;
      } else {
        // A symbolic size: more than one element when some dim is known to be >= 2 (every
        // symbol is, under 0/1 specialization); else unknown (`s0 - 1`), which matters only
        // where convert reads it (below).
        bool not_one = false;
        for (const graph::DimExpr& d : t.sizes) {
          not_one |=
              d.is_constant() ? d.constant() == 0 : sym::range_of(d.expr(), g.symbols).lo >= 2;
        }
        o.one_element = false;
        o.maybe_one_element = !not_one;
      }
      o.cpu_scalar = o.zero_dim && t.device.kind == graph::DeviceKind::CPU;
      o.input = input_of[a - n.args.data()];
      ++num_tensor_operands;
    } else if (number(a) || std::holds_alternative<bool>(*a)) {
      o.tensor = false;
      o.one_element = true;
      o.cpu_scalar = true;
      o.scalar = a;
      o.dtype = scalar_expr(*a).dtype();
    } else {
      return std::nullopt;
    }
    p.operands.push_back(o);
  }
  if (num_tensor_operands != num_inputs) return std::nullopt;

  bool cpu = g.type(n.outputs[0]).device.kind == graph::DeviceKind::CPU;
  p.cuda = g.type(n.outputs[0]).device.kind == graph::DeviceKind::CUDA;
  switch (rule.mode) {
    case Mode::Float:
    case Mode::Numeric: {
      bool ok = rule.mode == Mode::Float ? loop::is_float(p.out) : loop::is_numeric(p.out);
      if (!ok) return std::nullopt;
      p.comp = is_reduced(p.out) ? DType::Float32 : p.out;
      for (const Operand& o : p.operands) {
        if (!o.tensor && std::holds_alternative<bool>(*o.scalar)) return std::nullopt;
        if (!o.tensor && !loop::is_float(p.comp) && loop::is_float(o.dtype)) return std::nullopt;
        // CUDA reads a CPU scalar in f32 (convert); another operand of another dtype is not
        // lowered for it yet.
        if (is_reduced(p.out) && o.dtype != p.out && !cpu && !(p.cuda && o.cpu_scalar)) {
          return std::nullopt;
        }
      }
      break;
    }
    case Mode::Compare: {
      // A 0-dim tensor may be a wrapped Python number (a constant of i64, f64 or b8): both
      // readings must promote alike.
      TypeState as_wrapped, as_tensor;
      for (const Operand& o : p.operands) {
        if (!o.tensor) {
          as_wrapped.add_wrapped(o.dtype);
          as_tensor.add_wrapped(o.dtype);
        } else if (!o.zero_dim) {
          TypeState::add(as_wrapped.dim, o.dtype);
          TypeState::add(as_tensor.dim, o.dtype);
        } else {
          TypeState::add(as_tensor.zero, o.dtype);
          if (o.dtype == DType::Int64 || o.dtype == DType::Float64 || o.dtype == DType::Bool) {
            as_wrapped.add_wrapped(o.dtype);
          } else {
            TypeState::add(as_wrapped.zero, o.dtype);
          }
        }
      }
      std::optional<DType> t = as_tensor.result();
      if (p.out != DType::Bool || !t || t != as_wrapped.result()) return std::nullopt;
      p.comp = *t;
      // CUDA converts a CPU scalar (a Python number: a ReLU backward's `x <= 0` in bf16) to the
      // common dtype and compares in it, as the cast below does; a tensor of another dtype is not
      // lowered for it yet.
      for (const Operand& o : p.operands) {
        if (is_reduced(p.comp) && o.dtype != p.comp && !cpu && !o.cpu_scalar) return std::nullopt;
      }
      break;
    }
    case Mode::Logical:
      if (p.out != DType::Bool) return std::nullopt;
      p.comp = DType::Bool;
      break;
    case Mode::Where:
      if (p.operands.empty() || p.operands[0].dtype != DType::Bool) return std::nullopt;
      break;
    case Mode::Raw:
      break;
  }
  // Where a one-element operand converts otherwise (convert), its numel must be known.
  for (size_t i = 0; i < p.operands.size(); ++i) {
    const Operand& o = p.operands[i];
    if (o.maybe_one_element && (rule.mode == Mode::Float || rule.mode == Mode::Numeric) &&
        rule.opmath_other && i == 1 && is_reduced(p.out) && o.dtype != p.out) {
      return std::nullopt;
    }
  }
  if (rule.check && !rule.check(p)) return std::nullopt;
  return p;
}

}  // namespace

loop::Expr cast_to(loop::DType t, loop::Expr e) {
  return e.dtype() == t ? e : loop::Cast::make(t, std::move(e));
}

loop::DType float_compute_type(loop::DType t) {
  return t == DType::Float64 ? DType::Float64 : DType::Float32;
}

std::optional<loop::DType> to_loop_dtype(graph::DType t) {
  switch (t) {
    case graph::DType::UInt8:
    case graph::DType::Int8:
    case graph::DType::Int16:
    case graph::DType::Int32:
    case graph::DType::Int64:
    case graph::DType::Float16:
    case graph::DType::Float32:
    case graph::DType::Float64:
    case graph::DType::Bool:
    case graph::DType::BFloat16:
      return static_cast<loop::DType>(t);
    default:
      return std::nullopt;
  }
}

bool is_pointwise(const graph::Graph& g, const graph::Node& n) {
  return plan_node(g, n).has_value();
}

loop::Expr lower_pointwise(const graph::Graph& g, const graph::Node& n,
                           const std::vector<loop::Expr>& inputs) {
  std::optional<Plan> p = plan_node(g, n);
  EMBER_INTERNAL_ASSERT(p.has_value())
      << "lower_pointwise of " << g.op_of(n).qualified_name() << ", which is not pointwise";
  size_t num_tensors = 0;
  for (const Operand& o : p->operands) num_tensors += o.tensor;
  EMBER_INTERNAL_ASSERT(inputs.size() == num_tensors)
      << "lower_pointwise of " << p->op.qualified_name() << ": expected " << num_tensors
      << " inputs but got " << inputs.size();
  std::vector<Expr> operands;
  for (size_t i = 0; i < p->operands.size(); ++i) {
    const Operand& o = p->operands[i];
    Expr e;
    if (o.tensor) {
      EMBER_INTERNAL_ASSERT(o.input < static_cast<int>(inputs.size()) &&
                            inputs[o.input].defined() && inputs[o.input].dtype() == o.dtype)
          << "lower_pointwise of " << p->op.qualified_name() << ": input " << o.input
          << " is missing or not of type " << loop::dtype_name(o.dtype);
      e = inputs[o.input];
    } else {
      e = scalar_expr(*o.scalar);
    }
    operands.push_back(convert(*p, i, e));
  }
  return cast(p->out, p->rule.lower(*p, operands));
}

}  // namespace ember::sched
