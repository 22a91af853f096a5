/// \file
/// Internals of the pointwise lowering, shared by pointwise.cpp (dispatch, operand conversion and
/// type promotion) and pointwise_ops.cpp (the rule table). Not part of the sched API.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "loop/expr.h"

namespace ember::sched::detail {

using graph::Arg;
using loop::DType;
using loop::Expr;

bool is_reduced(DType t);

/// A Scalar argument's value when it is a number (int or double; not bool, not None).
std::optional<double> number(const Arg* a);
bool is_none(const Arg* a);
template <typename T>
bool arg_is(const Arg* a, T v) {
  const T* x = a ? std::get_if<T>(a) : nullptr;
  return x != nullptr && *x == v;
}

/// `e` converted to `t` (itself when it has that type).
Expr cast(DType t, Expr e);
/// The float constant `v` of float type `t`, rounded as c10 converts a double (via float).
Expr fconst(DType t, double v);
/// The small integral constant `v` in numeric type `t`.
Expr num(DType t, double v);
/// Scalar argument `a` (bool, int or double) as an element of its own type: b8, i64 or f64.
Expr scalar_expr(const Arg& a);
/// Scalar argument `a` converted like `Scalar::to<t>()`.
Expr constant(DType t, const Arg& a);

/// How a rule's operands are converted before its lowering sees them, and what `comp` is.
enum class Mode : uint8_t {
  Float,    ///< float output; comp = output type (f32 for bf16/f16); operands cast to comp
  Numeric,  ///< int or float output; as Float
  Compare,  ///< b8 output; comp = the operands' promoted type; operands cast to comp
  Logical,  ///< b8 output; comp = b8; operands cast to b8 (x != 0)
  Where,    ///< comp = output type; operand 0 (the b8 condition) as is, the others cast to comp
  Raw,      ///< comp = output type; operands as they are
};

/// One operand of a rule: a tensor argument, or a Scalar argument (a wrapped number).
struct Operand {
  DType dtype = DType::Float32;  ///< the type its element arrives in
  bool tensor = true;
  bool zero_dim = false;     ///< a 0-dim tensor (maybe a wrapped Python number)
  bool one_element = false;  ///< numel == 1
  /// A symbolic numel that may be 1 at some sizes (one_element is false): plan_node refuses the
  /// node where convert would read it differently.
  bool maybe_one_element = false;
  /// A Python number or a 0-dim CPU tensor: on CUDA, TensorIterator reads it as a scalar in the
  /// op's compute type (opmath), without rounding it to the common dtype first.
  bool cpu_scalar = false;
  int input = -1;  ///< tensor: index into `inputs`
  const Arg* scalar = nullptr;
};

struct Rule;

struct Plan {
  const graph::Graph& g;
  const graph::Node& n;
  const graph::OpInfo& op;
  const Rule& rule;
  DType out = DType::Float32;   ///< the output's loop type
  DType comp = DType::Float32;  ///< operands arrive in it; the lowering's result has it
  std::vector<Operand> operands;
  bool cuda = false;  ///< the output is on a CUDA device (eager's CUDA conversions)

  const Arg* arg(std::string_view name) const {
    for (size_t i = 0; i < op.arg_names.size() && i < n.args.size(); ++i) {
      if (op.arg_names[i] == name) return &n.args[i];
    }
    return nullptr;
  }
  /// Scalar argument `name` converted to comp.
  Expr param(std::string_view name) const { return constant(comp, *arg(name)); }
  /// Scalar argument `name` converted to the output type, then to comp (kernels that convert
  /// their scalars to scalar_t rather than to the opmath type: clamp, threshold).
  Expr rounded_param(std::string_view name) const { return cast(comp, constant(out, *arg(name))); }
  /// True when argument `name` is a Scalar usable in comp: a number, and an int that fits when
  /// comp is an integer type (eager raises on overflow).
  bool scalar_ok(std::string_view name) const {
    const Arg* a = arg(name);
    if (!number(a)) return false;
    if (loop::is_float(comp)) return true;
    return std::holds_alternative<int64_t>(*a) && loop::int_fits(comp, std::get<int64_t>(*a));
  }
  bool is_one(std::string_view name) const { return number(arg(name)) == 1.0; }
};

using Lower = std::function<Expr(const Plan&, const std::vector<Expr>&)>;
using Check = std::function<bool(const Plan&)>;

struct Rule {
  Mode mode;
  std::vector<std::string> operands;  ///< argument names, tensors or Scalars
  Lower lower;                        ///< result in comp
  Check check = {};                   ///< extra conditions on arguments and dtypes; may be empty
  bool opmath_other = false;  ///< eager reads a one-element `other` in the opmath type (mul, div)
};

/// The rules by op overload ({OpKind::add, "Tensor"}).
const std::map<graph::OpOverload, Rule>& rule_table();

}  // namespace ember::sched::detail
