#include "sym/expr.h"

#include <algorithm>
#include <numeric>

#include "support/error.h"
#include "support/hash.h"
#include "sym/int_math.h"

namespace ember::sym {
namespace {

using Atom = std::shared_ptr<const AtomNode>;

int cmp(int64_t a, int64_t b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

int compare_factors(const std::vector<Factor>& a, const std::vector<Factor>& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (int c = compare_atoms(*a[i].atom, *b[i].atom)) return c;
    if (int c = cmp(a[i].power, b[i].power)) return c;
  }
  return cmp(static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size()));
}

/// Wraps terms that are already canonical: sorted, distinct monomials, nonzero coefficients.
SymExpr make_expr(int64_t constant, std::vector<Term> terms) {
  Hasher h;
  h.i64(constant).u64(terms.size());
  for (const Term& t : terms) {
    h.i64(t.coeff).u64(t.factors.size());
    for (const Factor& f : t.factors) h.u64(f.atom->hash).i64(f.power);
  }
  auto node = std::make_shared<ExprNode>();
  node->constant = constant;
  node->terms = std::move(terms);
  node->hash = h.digest();
  return SymExpr(std::move(node));
}

SymExpr make_atom(AtomKind kind, SymbolId id, std::string name, SymExpr lhs, SymExpr rhs) {
  Hasher h;
  h.u64(static_cast<uint64_t>(kind));
  if (kind == AtomKind::Symbol) {
    h.i64(id).str(name);
  } else {
    h.u64(lhs.hash()).u64(rhs.hash());
  }
  auto atom = std::make_shared<AtomNode>();
  atom->kind = kind;
  atom->id = id;
  atom->name = std::move(name);
  atom->lhs = std::move(lhs);
  atom->rhs = std::move(rhs);
  atom->hash = h.digest();
  return atom_expr(std::move(atom));
}

SymExpr make_op(AtomKind kind, SymExpr lhs, SymExpr rhs) {
  return make_atom(kind, -1, "", std::move(lhs), std::move(rhs));
}

/// Sorts and merges terms whose factors are each canonical; folds empty monomials into the
/// constant and drops zero coefficients.
SymExpr from_terms(int64_t constant, std::vector<Term> terms) {
  std::stable_sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) {
    return compare_factors(a.factors, b.factors) < 0;
  });
  std::vector<Term> out;
  for (Term& t : terms) {
    if (t.factors.empty()) {
      constant = detail::add(constant, t.coeff);
    } else if (!out.empty() && compare_factors(out.back().factors, t.factors) == 0) {
      out.back().coeff = detail::add(out.back().coeff, t.coeff);
    } else {
      out.push_back(std::move(t));
    }
  }
  std::erase_if(out, [](const Term& t) { return t.coeff == 0; });
  return make_expr(constant, std::move(out));
}

/// The product of two sorted monomials: merged, equal atoms' powers added.
std::vector<Factor> multiply_monomials(const std::vector<Factor>& a, const std::vector<Factor>& b) {
  std::vector<Factor> out;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    int c = i == a.size() ? 1 : j == b.size() ? -1 : compare_atoms(*a[i].atom, *b[j].atom);
    if (c < 0) {
      out.push_back(a[i++]);
    } else if (c > 0) {
      out.push_back(b[j++]);
    } else {
      out.push_back({a[i].atom, detail::add(a[i].power, b[j].power)});
      ++i, ++j;
    }
  }
  return out;
}

SymExpr scale(const SymExpr& e, int64_t k) {
  if (k == 0) return 0;
  std::vector<Term> terms = e.node().terms;
  for (Term& t : terms) t.coeff = detail::mul(t.coeff, k);
  return make_expr(detail::mul(e.node().constant, k), std::move(terms));
}

/// The gcd of every coefficient and the constant (0 for the expression 0).
int64_t content_gcd(const ExprNode& e) {
  int64_t g = e.constant < 0 ? -e.constant : e.constant;
  for (const Term& t : e.terms) g = std::gcd(g, t.coeff < 0 ? -t.coeff : t.coeff);
  return g;
}

/// `e / g` where g divides every coefficient and the constant.
SymExpr divide_exact(const SymExpr& e, int64_t g) {
  std::vector<Term> terms = e.node().terms;
  for (Term& t : terms) t.coeff /= g;
  return make_expr(e.node().constant / g, std::move(terms));
}

/// The atom when `e` is exactly `1 * atom` of kind `kind`, else nullptr.
const AtomNode* single_atom(const SymExpr& e, AtomKind kind) {
  const ExprNode& n = e.node();
  if (n.constant != 0 || n.terms.size() != 1) return nullptr;
  const Term& t = n.terms[0];
  if (t.coeff != 1 || t.factors.size() != 1 || t.factors[0].power != 1) return nullptr;
  return t.factors[0].atom->kind == kind ? t.factors[0].atom.get() : nullptr;
}

SymExpr min_or_max(AtomKind kind, SymExpr a, SymExpr b) {
  if (a == b) return a;
  std::optional<int64_t> diff;
  try {
    diff = (a - b).as_constant();
  } catch (const Unsupported&) {
    // The difference overflows: no constant difference to decide by.
  }
  if (diff) return (*diff <= 0) == (kind == AtomKind::Min) ? a : b;
  if (compare(a, b) > 0) std::swap(a, b);
  return make_op(kind, std::move(a), std::move(b));
}

const std::shared_ptr<const ExprNode>& zero_node() {
  static const std::shared_ptr<const ExprNode> zero = [] {
    auto n = std::make_shared<ExprNode>();
    n->hash = Hasher().i64(0).u64(0).digest();
    return n;
  }();
  return zero;
}

}  // namespace

SymExpr::SymExpr() : node_(zero_node()) {}

SymExpr::SymExpr(int64_t constant) {
  if (constant == 0) {
    node_ = zero_node();
  } else {
    detail::checked(false, constant);
    *this = make_expr(constant, {});
  }
}

SymExpr SymExpr::symbol(SymbolId id, std::string name) {
  EMBER_INTERNAL_ASSERT(id >= 0 && !name.empty()) << "symbol " << id << " '" << name << "'";
  return make_atom(AtomKind::Symbol, id, std::move(name), SymExpr(), SymExpr());
}

bool SymExpr::is_constant() const {
  return node_->terms.empty();
}

int64_t SymExpr::constant() const {
  EMBER_INTERNAL_ASSERT(is_constant());
  return node_->constant;
}

std::optional<int64_t> SymExpr::as_constant() const {
  if (!is_constant()) return std::nullopt;
  return node_->constant;
}

std::optional<SymbolId> SymExpr::as_symbol() const {
  const ExprNode& n = *node_;
  if (n.constant != 0 || n.terms.size() != 1 || n.terms[0].coeff != 1) return std::nullopt;
  const auto& f = n.terms[0].factors;
  if (f.size() != 1 || f[0].power != 1 || f[0].atom->kind != AtomKind::Symbol) return std::nullopt;
  return f[0].atom->id;
}

uint64_t SymExpr::hash() const {
  return node_->hash;
}

bool SymExpr::operator==(const SymExpr& other) const {
  return node_ == other.node_ || (hash() == other.hash() && compare(*this, other) == 0);
}

int compare_atoms(const AtomNode& a, const AtomNode& b) {
  if (&a == &b) return 0;
  if (int c = cmp(static_cast<int64_t>(a.kind), static_cast<int64_t>(b.kind))) return c;
  if (a.kind == AtomKind::Symbol) {
    if (int c = cmp(a.id, b.id)) return c;
    return a.name.compare(b.name) < 0 ? -1 : a.name == b.name ? 0 : 1;
  }
  if (int c = compare(a.lhs, b.lhs)) return c;
  return compare(a.rhs, b.rhs);
}

int compare(const SymExpr& a, const SymExpr& b) {
  const ExprNode& x = a.node();
  const ExprNode& y = b.node();
  if (&x == &y) return 0;
  size_t n = std::min(x.terms.size(), y.terms.size());
  for (size_t i = 0; i < n; ++i) {
    if (int c = compare_factors(x.terms[i].factors, y.terms[i].factors)) return c;
    if (int c = cmp(x.terms[i].coeff, y.terms[i].coeff)) return c;
  }
  if (int c = cmp(static_cast<int64_t>(x.terms.size()), static_cast<int64_t>(y.terms.size()))) {
    return c;
  }
  return cmp(x.constant, y.constant);
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) {
  const auto& x = a.node().terms;
  const auto& y = b.node().terms;
  std::vector<Term> out;
  size_t i = 0, j = 0;
  while (i < x.size() || j < y.size()) {
    int c = i == x.size() ? 1 : j == y.size() ? -1 : compare_factors(x[i].factors, y[j].factors);
    if (c < 0) {
      out.push_back(x[i++]);
    } else if (c > 0) {
      out.push_back(y[j++]);
    } else {
      int64_t coeff = detail::add(x[i].coeff, y[j].coeff);
      if (coeff != 0) out.push_back({coeff, x[i].factors});
      ++i, ++j;
    }
  }
  return make_expr(detail::add(a.node().constant, b.node().constant), std::move(out));
}

SymExpr operator-(const SymExpr& a) {
  return scale(a, -1);
}

SymExpr operator-(const SymExpr& a, const SymExpr& b) {
  return a + scale(b, -1);
}

SymExpr operator*(const SymExpr& a, const SymExpr& b) {
  if (auto c = a.as_constant()) return scale(b, *c);
  if (auto c = b.as_constant()) return scale(a, *c);
  // Each side as terms with the constant as a term of no factors; every pair multiplies.
  auto with_constant = [](const ExprNode& n) {
    std::vector<Term> t = n.terms;
    if (n.constant != 0) t.push_back({n.constant, {}});
    return t;
  };
  std::vector<Term> x = with_constant(a.node());
  std::vector<Term> y = with_constant(b.node());
  std::vector<Term> out;
  for (const Term& s : x) {
    for (const Term& t : y) {
      out.push_back({detail::mul(s.coeff, t.coeff), multiply_monomials(s.factors, t.factors)});
    }
  }
  return from_terms(0, std::move(out));
}

namespace {

/// `a / b` when `b` is a single symbolic term (coefficient times a monomial) that divides every
/// term of `a` and `a` has no constant term: then `a // b` is exactly that quotient for every
/// binding with `b != 0`, and `a % b` is 0 (`(s0*s1*64) // (s0*2) -> s1*32`).
std::optional<SymExpr> divide_by_term(const SymExpr& a, const SymExpr& b) {
  const ExprNode& bn = b.node();
  const ExprNode& an = a.node();
  if (b.is_constant() || bn.constant != 0 || bn.terms.size() != 1) return std::nullopt;
  if (an.constant != 0 || an.terms.empty()) return std::nullopt;
  const int64_t b_coeff = bn.terms[0].coeff;
  const std::vector<Factor>& b_factors = bn.terms[0].factors;
  SymExpr out(0);
  for (const Term& t : an.terms) {
    if (t.coeff % b_coeff != 0) return std::nullopt;
    SymExpr term(t.coeff / b_coeff);
    std::vector<int64_t> used(b_factors.size(), 0);
    for (const Factor& f : t.factors) {
      int64_t power = f.power;
      for (size_t i = 0; i < b_factors.size(); ++i) {
        if (compare_atoms(*b_factors[i].atom, *f.atom) == 0) {
          if (power < b_factors[i].power) return std::nullopt;
          power -= b_factors[i].power;
          used[i] = 1;
        }
      }
      for (int64_t p = 0; p < power; ++p) term = term * atom_expr(f.atom);
    }
    if (std::find(used.begin(), used.end(), 0) != used.end()) return std::nullopt;
    out = out + term;
  }
  return out;
}

}  // namespace

SymExpr floordiv(const SymExpr& a, const SymExpr& b) {
  std::optional<int64_t> d = b.as_constant();
  if (!d) {
    if (a.as_constant() == 0) return 0;
    if (std::optional<SymExpr> q = divide_by_term(a, b)) return *q;
    return make_op(AtomKind::FloorDiv, a, b);
  }
  EMBER_CHECK(*d != 0) << "division by zero";
  if (auto c = a.as_constant()) return detail::floordiv(*c, *d);
  if (*d < 0) return floordiv(-a, -*d);
  int64_t g = std::gcd(*d, content_gcd(a.node()));
  if (g > 1) return floordiv(divide_exact(a, g), *d / g);
  if (*d == 1) return a;
  // (q*d + r) // d -> q + r // d, term by term.
  const ExprNode& n = a.node();
  std::vector<Term> q, r;
  for (const Term& t : n.terms) {
    if (t.coeff % *d == 0) {
      q.push_back({t.coeff / *d, t.factors});
    } else {
      r.push_back(t);
    }
  }
  bool constant_divides = n.constant % *d == 0;
  if (!q.empty() || (constant_divides && n.constant != 0)) {
    int64_t qc = constant_divides ? n.constant / *d : 0;
    int64_t rc = constant_divides ? 0 : n.constant;
    return make_expr(qc, std::move(q)) + floordiv(make_expr(rc, std::move(r)), *d);
  }
  // (x // e) // d -> x // (e*d).
  if (const AtomNode* inner = single_atom(a, AtomKind::FloorDiv)) {
    std::optional<int64_t> e = inner->rhs.as_constant();
    int64_t ed;
    if (e && *e > 0 && !__builtin_mul_overflow(*e, *d, &ed)) return floordiv(inner->lhs, ed);
  }
  return make_op(AtomKind::FloorDiv, a, *d);
}

SymExpr mod(const SymExpr& a, const SymExpr& b) {
  std::optional<int64_t> d = b.as_constant();
  if (!d) {
    if (a.as_constant() == 0) return 0;
    if (divide_by_term(a, b)) return 0;
    return make_op(AtomKind::Mod, a, b);
  }
  EMBER_CHECK(*d != 0) << "modulo by zero";
  if (auto c = a.as_constant()) return detail::mod(*c, *d);
  if (*d < 0) return -mod(-a, -*d);
  if (*d == 1) return 0;
  // (q*d + r) % d -> r % d: every coefficient and the constant reduce into [0, d).
  std::vector<Term> terms;
  for (const Term& t : a.node().terms) {
    int64_t coeff = detail::mod(t.coeff, *d);
    if (coeff != 0) terms.push_back({coeff, t.factors});
  }
  int64_t constant = detail::mod(a.node().constant, *d);
  if (terms.empty()) return constant;
  SymExpr reduced = make_expr(constant, std::move(terms));
  // (x % (k*d)) % d -> x % d.
  if (const AtomNode* inner = single_atom(reduced, AtomKind::Mod)) {
    std::optional<int64_t> m = inner->rhs.as_constant();
    if (m && *m > 0 && *m % *d == 0) return mod(inner->lhs, *d);
  }
  return make_op(AtomKind::Mod, std::move(reduced), *d);
}

SymExpr min(const SymExpr& a, const SymExpr& b) {
  return min_or_max(AtomKind::Min, a, b);
}
SymExpr max(const SymExpr& a, const SymExpr& b) {
  return min_or_max(AtomKind::Max, a, b);
}

SymExpr atom_expr(std::shared_ptr<const AtomNode> atom) {
  std::vector<Term> terms;
  terms.push_back({1, {Factor{std::move(atom), 1}}});
  return make_expr(0, std::move(terms));
}

SymExpr apply(AtomKind kind, const SymExpr& lhs, const SymExpr& rhs) {
  switch (kind) {
    case AtomKind::FloorDiv:
      return floordiv(lhs, rhs);
    case AtomKind::Mod:
      return mod(lhs, rhs);
    case AtomKind::Min:
      return min(lhs, rhs);
    case AtomKind::Max:
      return max(lhs, rhs);
    case AtomKind::Symbol:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << "apply() of a symbol";
  return 0;
}

SymExpr map_atoms(const SymExpr& e,
                  const std::function<SymExpr(const std::shared_ptr<const AtomNode>&)>& f) {
  SymExpr out = e.node().constant;
  for (const Term& t : e.node().terms) {
    SymExpr term = t.coeff;
    for (const Factor& factor : t.factors) {
      SymExpr a = f(factor.atom);
      for (int64_t i = 0; i < factor.power; ++i) term = term * a;
    }
    out = out + term;
  }
  return out;
}

}  // namespace ember::sym
