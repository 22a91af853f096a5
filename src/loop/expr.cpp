#include "loop/expr.h"

#include <cctype>
#include <cmath>
#include <limits>

#include "support/error.h"

namespace ember::loop {

const char* expr_kind_name(ExprKind k) {
  switch (k) {
#define EMBER_LOOP_EXPR(Name) \
  case ExprKind::Name:        \
    return #Name;
#include "loop/nodes.def"
  }
  return "?";
}

std::optional<BinaryCategory> binary_category(ExprKind k) {
  switch (k) {
#define EMBER_LOOP_BINARY(Name, Symbol, Cat) \
  case ExprKind::Name:                       \
    return BinaryCategory::Cat;
#include "loop/nodes.def"
    default:
      return std::nullopt;
  }
}

Expr IntImm::make(DType t, int64_t value) {
  EMBER_INTERNAL_ASSERT(is_int(t) || t == DType::Bool) << "IntImm of type " << dtype_name(t);
  EMBER_INTERNAL_ASSERT(int_fits(t, value)) << value << " does not fit " << dtype_name(t);
  return Expr(std::make_shared<IntImm>(t, value));
}

Expr FloatImm::make(DType t, double value) {
  EMBER_INTERNAL_ASSERT(is_float(t)) << "FloatImm of type " << dtype_name(t);
  if (t == DType::Float32) value = static_cast<double>(static_cast<float>(value));
  return Expr(std::make_shared<FloatImm>(t, value));
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

Expr Var::make(std::string name, DType t) {
  EMBER_INTERNAL_ASSERT(is_identifier(name)) << "bad variable name '" << name << "'";
  return Expr(std::make_shared<Var>(t, std::move(name)));
}

Expr SizeVar::make(std::string name) {
  EMBER_INTERNAL_ASSERT(is_identifier(name)) << "bad size variable name '" << name << "'";
  return Expr(std::make_shared<SizeVar>(std::move(name)));
}

template <ExprKind K>
Expr BinaryNode<K>::make(Expr a, Expr b) {
  const char* name = expr_kind_name(K);
  EMBER_INTERNAL_ASSERT(a.defined() && b.defined()) << name << " with an undefined operand";
  EMBER_INTERNAL_ASSERT(a.dtype() == b.dtype())
      << name << " of " << dtype_name(a.dtype()) << " and " << dtype_name(b.dtype());
  DType t = a.dtype();
  DType result = t;
  switch (*binary_category(K)) {
    case BinaryCategory::Arith:
      EMBER_INTERNAL_ASSERT(is_numeric(t)) << name << " of " << dtype_name(t);
      break;
    case BinaryCategory::Float:
      EMBER_INTERNAL_ASSERT(is_float(t)) << name << " of " << dtype_name(t);
      break;
    case BinaryCategory::Int:
      EMBER_INTERNAL_ASSERT(is_int(t)) << name << " of " << dtype_name(t);
      break;
    case BinaryCategory::Compare:
      EMBER_INTERNAL_ASSERT(is_numeric(t) ||
                            ((K == ExprKind::EQ || K == ExprKind::NE) && t == DType::Bool))
          << name << " of " << dtype_name(t);
      result = DType::Bool;
      break;
    case BinaryCategory::Logical:
      EMBER_INTERNAL_ASSERT(t == DType::Bool) << name << " of " << dtype_name(t);
      break;
  }
  return Expr(std::make_shared<BinaryNode<K>>(result, std::move(a), std::move(b)));
}

#define EMBER_LOOP_BINARY(Name, Symbol, Cat) template struct BinaryNode<ExprKind::Name>;
#include "loop/nodes.def"

Expr make_binary(ExprKind k, Expr a, Expr b) {
  switch (k) {
#define EMBER_LOOP_BINARY(Name, Symbol, Cat) \
  case ExprKind::Name:                       \
    return Name::make(std::move(a), std::move(b));
#include "loop/nodes.def"
    default:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << expr_kind_name(k) << " is not a binary node";
  return {};
}

Expr Not::make(Expr a) {
  EMBER_INTERNAL_ASSERT(a.defined() && a.dtype() == DType::Bool) << "Not of a non-b8 operand";
  return Expr(std::make_shared<Not>(std::move(a)));
}

Expr Select::make(Expr cond, Expr t, Expr f) {
  EMBER_INTERNAL_ASSERT(cond.defined() && t.defined() && f.defined())
      << "Select with an undefined operand";
  EMBER_INTERNAL_ASSERT(cond.dtype() == DType::Bool)
      << "Select condition of " << dtype_name(cond.dtype());
  EMBER_INTERNAL_ASSERT(t.dtype() == f.dtype())
      << "Select arms of " << dtype_name(t.dtype()) << " and " << dtype_name(f.dtype());
  return Expr(std::make_shared<Select>(std::move(cond), std::move(t), std::move(f)));
}

Expr Cast::make(DType t, Expr value) {
  EMBER_INTERNAL_ASSERT(value.defined()) << "Cast of an undefined operand";
  return Expr(std::make_shared<Cast>(t, std::move(value)));
}

Expr Load::make(DType t, std::string buffer, Expr index) {
  EMBER_INTERNAL_ASSERT(is_identifier(buffer)) << "bad buffer name '" << buffer << "'";
  EMBER_INTERNAL_ASSERT(index.defined() && index.dtype() == kIndexType)
      << "Load of " << buffer << " with a non-i64 index";
  return Expr(std::make_shared<Load>(t, std::move(buffer), std::move(index)));
}

const char* call_fn_name(CallFn fn) {
  switch (fn) {
#define EMBER_LOOP_CALL(Enum, Name, Arity, Kind) \
  case CallFn::Enum:                             \
    return Name;
#include "loop/calls.def"
  }
  return "?";
}

std::optional<CallFn> parse_call_fn(std::string_view name) {
#define EMBER_LOOP_CALL(Enum, Name, Arity, Kind) \
  if (name == Name) return CallFn::Enum;
#include "loop/calls.def"
  return std::nullopt;
}

int call_fn_arity(CallFn fn) {
  switch (fn) {
#define EMBER_LOOP_CALL(Enum, Name, Arity, Kind) \
  case CallFn::Enum:                             \
    return Arity;
#include "loop/calls.def"
  }
  return 0;
}

CallKind call_fn_kind(CallFn fn) {
  switch (fn) {
#define EMBER_LOOP_CALL(Enum, Name, Arity, Kind) \
  case CallFn::Enum:                             \
    return CallKind::Kind;
#include "loop/calls.def"
  }
  return CallKind::Float;
}

Expr Call::make(CallFn fn, std::vector<Expr> args) {
  const char* name = call_fn_name(fn);
  EMBER_INTERNAL_ASSERT(static_cast<int>(args.size()) == call_fn_arity(fn))
      << name << " takes " << call_fn_arity(fn) << " arguments, not " << args.size();
  for (const Expr& a : args) {
    EMBER_INTERNAL_ASSERT(a.defined()) << name << " with an undefined argument";
    EMBER_INTERNAL_ASSERT(a.dtype() == args[0].dtype())
        << name << " of " << dtype_name(args[0].dtype()) << " and " << dtype_name(a.dtype());
  }
  DType t = args[0].dtype();
  CallKind kind = call_fn_kind(fn);
  const bool accepted = kind == CallKind::Numeric ? is_numeric(t)
                        : kind == CallKind::Index ? t == kIndexType
                                                  : is_float(t);
  EMBER_INTERNAL_ASSERT(accepted) << name << " of " << dtype_name(t);
  DType result = kind == CallKind::Predicate ? DType::Bool : t;
  return Expr(std::make_shared<Call>(result, fn, std::move(args)));
}

Expr idx(int64_t v) {
  return IntImm::make(kIndexType, v);
}
Expr bool_imm(bool v) {
  return IntImm::make(DType::Bool, v ? 1 : 0);
}
Expr f32(double v) {
  return FloatImm::make(DType::Float32, v);
}
Expr f64(double v) {
  return FloatImm::make(DType::Float64, v);
}
Expr var(std::string name) {
  return Var::make(std::move(name));
}
Expr size(std::string name) {
  return SizeVar::make(std::move(name));
}

std::optional<int64_t> as_const_int(const Expr& e) {
  if (const auto* imm = e.as<IntImm>()) return imm->value;
  return std::nullopt;
}

bool is_const(const Expr& e, double v) {
  if (const auto* imm = e.as<IntImm>()) return static_cast<double>(imm->value) == v;
  if (const auto* imm = e.as<FloatImm>()) return imm->value == v;
  return false;
}

Expr operator+(Expr a, Expr b) {
  return Add::make(std::move(a), std::move(b));
}
Expr operator-(Expr a, Expr b) {
  return Sub::make(std::move(a), std::move(b));
}
Expr operator*(Expr a, Expr b) {
  return Mul::make(std::move(a), std::move(b));
}
Expr operator+(Expr a, int64_t b) {
  return Add::make(std::move(a), idx(b));
}
Expr operator-(Expr a, int64_t b) {
  return Sub::make(std::move(a), idx(b));
}
Expr operator*(Expr a, int64_t b) {
  return Mul::make(std::move(a), idx(b));
}
int64_t shl_int(DType t, int64_t a, int64_t b) {
  const int bits = dtype_bits(t);
  if (b < 0 || b >= bits) return 0;
  return wrap_int(t, static_cast<int64_t>(static_cast<uint64_t>(a) << b));
}

int64_t shr_int(DType t, int64_t a, int64_t b) {
  const int max_shift = dtype_bits(t) - (t == DType::UInt8 ? 0 : 1);
  if (b < 0 || b >= max_shift) b = max_shift;
  return a >> b;  // a holds t's value: u8 is non-negative, so this is a logical shift there
}

Expr floordiv(Expr a, Expr b) {
  return FloorDiv::make(std::move(a), std::move(b));
}
Expr mod(Expr a, Expr b) {
  return Mod::make(std::move(a), std::move(b));
}
Expr min(Expr a, Expr b) {
  return Min::make(std::move(a), std::move(b));
}
Expr max(Expr a, Expr b) {
  return Max::make(std::move(a), std::move(b));
}

}  // namespace ember::loop
