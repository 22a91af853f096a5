/// \file
/// Expressions of the loop IR: index arithmetic and element values, as immutable nodes behind
/// reference-counted handles (`Expr`). The node list is nodes.def.
///
/// Semantics (every pass and backend relies on these):
///  - Types. Every expression has a DType. Index expressions (loop variables, sizes, buffer
///    indices, For bounds, Allocate sizes) are i64. Booleans are b8. Operands of a binary node
///    have equal dtypes; there is no implicit promotion: conversions are explicit Casts.
///  - Symbols. A `Var` is bound by an enclosing For (i64) or Let (any dtype) and identified by
///    its name. A `SizeVar` is a shape symbol declared by the kernel; sizes stay symbolic in the
///    IR even when known, and are bound to integers only by a `Bindings` map (stmt.h). Sizes are
///    >= 0.
///  - Integer overflow. i64 index arithmetic is assumed never to overflow; the simplifier relies
///    on it, and lowering must choose i64 when i32 could overflow. Integer *value* arithmetic
///    wraps (two's complement), as in torch.
///  - FloorDiv and Mod have Python semantics: FloorDiv rounds toward negative infinity and Mod
///    takes the sign of the divisor, so x == (x // d) * d + x % d. A zero divisor is undefined
///    behaviour: lowering must not produce one. Index divisors are positive in practice.
///  - Floats follow IEEE-754 without fast-math: no reassociation, no contraction into FMAs, NaN
///    and signed zeros preserved. Min and Max propagate NaN (torch.minimum / torch.maximum).
///    f16 and bf16 arithmetic means: compute in f32, round to the type.
///  - Comparisons on floats are IEEE (false for NaN, except !=).
///  - Evaluation order is unobservable: expressions have no side effects and read memory only
///    through Load. Select evaluates only the chosen arm, so a Load guarded by a Select (padding,
///    masks) may have an out-of-bounds index in the other arm; a backend that evaluates both arms
///    (a vector blend) must mask such loads.
///  - Cast converts like a C++ static_cast, except float -> integer out of range is undefined,
///    and a cast to b8 is `x != 0`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "loop/dtype.h"

namespace ember::loop {

enum class ExprKind : uint8_t {
#define EMBER_LOOP_EXPR(Name) Name,
#include "loop/nodes.def"
};
/// "Add", "Load", ...
const char* expr_kind_name(ExprKind k);

/// How a binary node types its operands (see nodes.def).
enum class BinaryCategory : uint8_t { Arith, Float, Int, Compare, Logical };

/// The base of every expression node. Fields never change after construction.
struct ExprNode {
  const ExprKind kind;
  const DType dtype;
  virtual ~ExprNode() = default;

 protected:
  ExprNode(ExprKind k, DType t) : kind(k), dtype(t) {}
};

/// A shared, immutable handle to an expression node; may be undefined (null).
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> node) : node_(std::move(node)) {}

  bool defined() const { return node_ != nullptr; }
  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  ExprKind kind() const { return node_->kind; }
  DType dtype() const { return node_->dtype; }
  /// The node as `T`, or nullptr when it is another kind (or undefined).
  template <typename T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  /// Identity (same node), not structural equality; see equality.h for that.
  bool same_as(const Expr& other) const { return node_ == other.node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

/// An integer or boolean constant. `value` fits `dtype` (b8: 0 or 1).
struct IntImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::IntImm;
  const int64_t value;
  IntImm(DType t, int64_t v) : ExprNode(kKind, t), value(v) {}
  static Expr make(DType t, int64_t value);
  auto fields() const { return std::tie(value); }
};

/// A float constant. For f32 the value is rounded to float on construction; NaN and infinities
/// are allowed.
struct FloatImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::FloatImm;
  const double value;
  FloatImm(DType t, double v) : ExprNode(kKind, t), value(v) {}
  static Expr make(DType t, double value);
  auto fields() const { return std::tie(value); }
};

/// A variable bound by an enclosing For (i64) or Let. Identified by name; the name is an
/// identifier ([A-Za-z_][A-Za-z0-9_]*).
struct Var final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Var;
  const std::string name;
  Var(DType t, std::string n) : ExprNode(kKind, t), name(std::move(n)) {}
  static Expr make(std::string name, DType t = kIndexType);
  auto fields() const { return std::tie(name); }
};

/// A shape symbol (i64, >= 0) declared by the kernel and bound only by Bindings.
struct SizeVar final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::SizeVar;
  const std::string name;
  SizeVar(std::string n) : ExprNode(kKind, kIndexType), name(std::move(n)) {}
  static Expr make(std::string name);
  auto fields() const { return std::tie(name); }
};

/// A two-operand node; `K` is one of the EMBER_LOOP_BINARY kinds of nodes.def. The result type
/// is the operands' type, or b8 for comparisons.
template <ExprKind K>
struct BinaryNode final : ExprNode {
  static constexpr ExprKind kKind = K;
  const Expr a, b;
  BinaryNode(DType t, Expr a_, Expr b_) : ExprNode(K, t), a(std::move(a_)), b(std::move(b_)) {}
  /// Requires defined operands of one dtype that the category accepts.
  static Expr make(Expr a, Expr b);
  auto fields() const { return std::tie(a, b); }
};

using Add = BinaryNode<ExprKind::Add>;            ///< a + b
using Sub = BinaryNode<ExprKind::Sub>;            ///< a - b
using Mul = BinaryNode<ExprKind::Mul>;            ///< a * b
using Div = BinaryNode<ExprKind::Div>;            ///< a / b, floats only (IEEE division)
using FloorDiv = BinaryNode<ExprKind::FloorDiv>;  ///< floor(a / b), integers only (Python //)
using Mod = BinaryNode<ExprKind::Mod>;            ///< a - floor(a / b) * b, integers (Python %)
using Min = BinaryNode<ExprKind::Min>;            ///< the smaller; NaN if either is NaN
using Max = BinaryNode<ExprKind::Max>;            ///< the larger; NaN if either is NaN
using LT = BinaryNode<ExprKind::LT>;              ///< a < b, b8
using LE = BinaryNode<ExprKind::LE>;              ///< a <= b, b8
using EQ = BinaryNode<ExprKind::EQ>;              ///< a == b, b8 (operands may be b8)
using NE = BinaryNode<ExprKind::NE>;              ///< a != b, b8 (operands may be b8)
using And = BinaryNode<ExprKind::And>;            ///< logical and of b8 values
using Or = BinaryNode<ExprKind::Or>;              ///< logical or of b8 values
using BitAnd = BinaryNode<ExprKind::BitAnd>;      ///< a & b, integers (two's complement)
using BitOr = BinaryNode<ExprKind::BitOr>;        ///< a | b, integers
using BitXor = BinaryNode<ExprKind::BitXor>;      ///< a ^ b, integers
/// a << b in an integer type of W bits, as torch's CPU kernel: 0 when b < 0 or b >= W, else the
/// bits shifted out of the type are dropped (two's complement wrap).
using Shl = BinaryNode<ExprKind::Shl>;
/// a >> b in an integer type of W bits, as torch's CPU kernel: arithmetic (sign-filling) for
/// signed types, logical for u8; a b < 0 or >= M, where M = W - 1 for signed types and W for u8,
/// shifts by M (so -1 or 0 for signed types, 0 for u8).
using Shr = BinaryNode<ExprKind::Shr>;

/// The category of a binary kind; nullopt for other kinds.
std::optional<BinaryCategory> binary_category(ExprKind k);
/// Builds the binary node of kind `k` (one of the EMBER_LOOP_BINARY kinds).
Expr make_binary(ExprKind k, Expr a, Expr b);

/// Logical not of a b8 value.
struct Not final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Not;
  const Expr a;
  explicit Not(Expr a_) : ExprNode(kKind, DType::Bool), a(std::move(a_)) {}
  static Expr make(Expr a);
  auto fields() const { return std::tie(a); }
};

/// `cond ? t : f` (torch.where on one element). Evaluates only the chosen arm.
struct Select final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Select;
  const Expr cond, t, f;
  Select(Expr c, Expr t_, Expr f_)
      : ExprNode(kKind, t_.dtype()), cond(std::move(c)), t(std::move(t_)), f(std::move(f_)) {}
  /// Requires a b8 condition and arms of one dtype.
  static Expr make(Expr cond, Expr t, Expr f);
  auto fields() const { return std::tie(cond, t, f); }
};

/// Converts `value` to `dtype` (see the semantics block).
struct Cast final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Cast;
  const Expr value;
  Cast(DType t, Expr v) : ExprNode(kKind, t), value(std::move(v)) {}
  static Expr make(DType t, Expr value);
  auto fields() const { return std::tie(value); }
};

/// Reads element `index` (an i64 element offset from the buffer's base, strides already
/// applied) of buffer `buffer`, whose element type is `dtype`.
struct Load final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Load;
  const std::string buffer;
  const Expr index;
  Load(DType t, std::string buf, Expr idx)
      : ExprNode(kKind, t), buffer(std::move(buf)), index(std::move(idx)) {}
  static Expr make(DType t, std::string buffer, Expr index);
  auto fields() const { return std::tie(buffer, index); }
};

enum class CallFn : uint8_t {
#define EMBER_LOOP_CALL(Enum, Name, Arity, Kind) Enum,
#include "loop/calls.def"
};
/// How a function types its operands (see calls.def).
enum class CallKind : uint8_t { Float, Numeric, Predicate, Index };
const char* call_fn_name(CallFn fn);
std::optional<CallFn> parse_call_fn(std::string_view name);
int call_fn_arity(CallFn fn);
CallKind call_fn_kind(CallFn fn);

/// A pointwise math function applied to `args` (see calls.def).
struct Call final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::Call;
  const CallFn fn;
  const std::vector<Expr> args;
  Call(DType t, CallFn f, std::vector<Expr> a) : ExprNode(kKind, t), fn(f), args(std::move(a)) {}
  /// Requires the function's arity, operands of one dtype, and a dtype its kind accepts.
  static Expr make(CallFn fn, std::vector<Expr> args);
  auto fields() const { return std::tie(fn, args); }
};

// ---- builders, for lowerings and tests -----------------------------------------------------

/// An i64 constant.
Expr idx(int64_t v);
/// A b8 constant.
Expr bool_imm(bool v);
Expr f32(double v);
Expr f64(double v);
/// `Var::make(name, i64)`.
Expr var(std::string name);
Expr size(std::string name);

/// True for names the text form can spell: [A-Za-z_][A-Za-z0-9_]*.
bool is_identifier(std::string_view name);

/// The constant value of an IntImm, or nullopt.
std::optional<int64_t> as_const_int(const Expr& e);
/// True when `e` is an IntImm or FloatImm equal to `v`.
bool is_const(const Expr& e, double v);

/// Python `a // b` and `a % b` on int64 (b != 0; INT64_MIN // -1 wraps).
inline int64_t floordiv_i64(int64_t a, int64_t b) {
  if (b == -1) return static_cast<int64_t>(0ULL - static_cast<uint64_t>(a));
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t mod_i64(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
/// Shl and Shr (see above) of the values `a` and `b` of integer type `t`; the result is wrapped
/// to `t`.
int64_t shl_int(DType t, int64_t a, int64_t b);
int64_t shr_int(DType t, int64_t a, int64_t b);

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator+(Expr a, int64_t b);
Expr operator-(Expr a, int64_t b);
Expr operator*(Expr a, int64_t b);
Expr floordiv(Expr a, Expr b);
Expr mod(Expr a, Expr b);
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);

}  // namespace ember::loop
