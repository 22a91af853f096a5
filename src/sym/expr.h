/// \file
/// Symbolic integer expressions over shape symbols (docs/design/symbolic.md): the values of sizes,
/// strides and offsets once shapes are dynamic. Immutable, shared, always in canonical form.
///
/// Semantics:
///  - Values are int64. Arithmetic that would leave (INT64_MIN, INT64_MAX] throws Unsupported
///    ("symbolic integer overflow"); INT64_MIN itself is never a constant or a coefficient, so
///    negation never overflows. (range.h uses INT64_MIN and INT64_MAX as -inf and +inf.)
///  - FloorDiv and Mod have Python semantics: FloorDiv rounds toward -inf and Mod takes the sign of
///    the divisor, so x == (x // d) * d + x % d. A zero divisor is a UserError when it is a
///    constant, and undefined otherwise (evaluate() throws UserError when it meets one).
///  - A symbol is an integer named by its SymbolId; ShapeEnv (shape_env.h) gives it a name, a
///    range, a hint and a source. Expressions never hold a ShapeEnv: every rule applied while an
///    expression is built holds for all integer values of its symbols.
///
/// Canonical form (what every builder returns, so structural equality is polynomial equality):
///  - an expression is a sum `constant + coeff_1 * monomial_1 + ...`: nonzero integer
///    coefficients, distinct monomials, terms sorted by monomial (the order of compare());
///  - a monomial is a product of atoms with positive powers, sorted by atom, each atom once;
///  - an atom is a symbol or FloorDiv(a, b), Mod(a, b), Min(a, b), Max(a, b) whose operands are
///    canonical expressions, each satisfying its builder's rules below (so `s0*2 + s1` and
///    `s1 + 2*s0` build the same expression, and `s0 - s0` builds 0).
///
/// Rules the builders apply (each exact for every integer value of the symbols):
///  - +, -, *: polynomial arithmetic; constants fold, equal monomials merge, products distribute.
///  - floordiv(a, d), constant d: constants fold; d < 0 becomes (-a) // (-d); x // 1 -> x; the gcd
///    g of d and every coefficient and the constant divides out, (g*x) // (g*e) -> x // e; terms
///    whose coefficient d divides leave, (a*d + b) // d -> a + b // d; nested divisions merge,
///    (x // a) // b -> x // (a*b) for positive constants. 0 // b -> 0 for any b.
///  - mod(a, d), constant d: constants fold; d < 0 becomes -((-a) % (-d)); x % 1 -> 0; every
///    coefficient and the constant are reduced into [0, d), so (a*d + b) % d -> b % d;
///    (x % (k*d)) % d -> x % d for a positive constant k*d. 0 % b -> 0 for any b.
///  - min(a, b), max(a, b): constants fold; equal operands, or operands whose difference is a
///    constant, pick one; the operands are sorted (min and max are commutative).
/// Rules that need symbol ranges (x // d -> 0 when 0 <= x < d, and so on) are simplify()'s.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ember::sym {

/// A symbol's number in its ShapeEnv (printed `s<id>` by default).
using SymbolId = int32_t;

class SymExpr;
struct ExprNode;
struct AtomNode;

/// The kinds of atom (the order is the canonical order of atoms of different kinds).
enum class AtomKind : uint8_t { Symbol, FloorDiv, Mod, Min, Max };

/// A shared, immutable, canonical expression. Cheap to copy; the default value is 0.
class SymExpr {
 public:
  SymExpr();
  /*implicit*/ SymExpr(int64_t constant);
  /// The symbol `id`, printed as `name` (an identifier that is not `min` or `max`).
  static SymExpr symbol(SymbolId id, std::string name);

  bool is_constant() const;
  /// Requires is_constant().
  int64_t constant() const;
  /// The constant, or nullopt.
  std::optional<int64_t> as_constant() const;
  /// The symbol's id when the expression is exactly one symbol, or nullopt.
  std::optional<SymbolId> as_symbol() const;

  /// Structural hash (stable across runs; see support/hash.h).
  uint64_t hash() const;
  /// Structural equality: the same canonical form.
  bool operator==(const SymExpr& other) const;
  bool operator!=(const SymExpr& other) const { return !(*this == other); }

  const ExprNode& node() const { return *node_; }
  /// The shared node (to hold an expression without a SymExpr, as graph::DimExpr does).
  const std::shared_ptr<const ExprNode>& node_ptr() const { return node_; }

  /// Internal: wraps a node already in canonical form (used by expr.cpp's builders).
  explicit SymExpr(std::shared_ptr<const ExprNode> node) : node_(std::move(node)) {}

 private:
  std::shared_ptr<const ExprNode> node_;
};

/// An atom of a monomial, raised to `power` >= 1.
struct Factor {
  std::shared_ptr<const AtomNode> atom;
  int64_t power = 1;
};

/// `coeff * factors...`; coeff != 0 and factors nonempty in an ExprNode.
struct Term {
  int64_t coeff = 0;
  std::vector<Factor> factors;
};

/// The canonical sum: `constant + terms...`.
struct ExprNode {
  int64_t constant = 0;
  std::vector<Term> terms;
  uint64_t hash = 0;
};

/// A symbol, or an operation over two canonical expressions (FloorDiv(lhs, rhs), ...).
struct AtomNode {
  AtomKind kind = AtomKind::Symbol;
  SymbolId id = -1;  ///< Symbol only
  std::string name;  ///< Symbol only
  SymExpr lhs, rhs;  ///< every other kind
  uint64_t hash = 0;
};

/// The total order of canonical forms (<0, 0, >0). Deterministic: it compares structure (symbol
/// ids, constants, kinds), never addresses. Atoms: by kind, then symbols by id and other atoms by
/// operands. Monomials: their factors lexicographically (atom, then power), a prefix first.
/// Expressions: terms pairwise (monomial, then coefficient), fewer terms first, then the constant.
int compare(const SymExpr& a, const SymExpr& b);
int compare_atoms(const AtomNode& a, const AtomNode& b);

/// Polynomial arithmetic, canonical results. Throw Unsupported on int64 overflow.
SymExpr operator+(const SymExpr& a, const SymExpr& b);
SymExpr operator-(const SymExpr& a, const SymExpr& b);
SymExpr operator-(const SymExpr& a);
SymExpr operator*(const SymExpr& a, const SymExpr& b);
/// Python `a // b`. Throws UserError when b is the constant 0.
SymExpr floordiv(const SymExpr& a, const SymExpr& b);
/// Python `a % b`. Throws UserError when b is the constant 0.
SymExpr mod(const SymExpr& a, const SymExpr& b);
/// The smaller and the larger of the two values.
SymExpr min(const SymExpr& a, const SymExpr& b);
SymExpr max(const SymExpr& a, const SymExpr& b);

/// The expression an atom stands for (a monomial of one factor, coefficient 1).
SymExpr atom_expr(std::shared_ptr<const AtomNode> atom);
/// Rebuilds an atom of kind `kind` (not Symbol) through its builder.
SymExpr apply(AtomKind kind, const SymExpr& lhs, const SymExpr& rhs);
/// `e` with each atom replaced by `f(atom)`, rebuilt through the builders (canonical again):
/// the walk of substitution and simplification.
SymExpr map_atoms(const SymExpr& e,
                  const std::function<SymExpr(const std::shared_ptr<const AtomNode>&)>& f);

}  // namespace ember::sym

template <>
struct std::hash<ember::sym::SymExpr> {
  size_t operator()(const ember::sym::SymExpr& e) const { return e.hash(); }
};
