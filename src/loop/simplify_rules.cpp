// The simplifier's rule table. Each rule is a small function from a node (children already
// simplified) to its replacement; the driver (simplify.cpp) applies them to a fixed point.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "loop/equality.h"
#include "loop/simplify_internal.h"

namespace ember::loop::simplify_internal {
namespace {

constexpr uint64_t bit(ExprKind k) {
  return uint64_t{1} << static_cast<int>(k);
}
constexpr uint64_t kArith = bit(ExprKind::Add) | bit(ExprKind::Sub) | bit(ExprKind::Mul);
constexpr uint64_t kCompare =
    bit(ExprKind::LT) | bit(ExprKind::LE) | bit(ExprKind::EQ) | bit(ExprKind::NE);
constexpr uint64_t kBinary = kArith | kCompare | bit(ExprKind::Div) | bit(ExprKind::FloorDiv) |
                             bit(ExprKind::Mod) | bit(ExprKind::Min) | bit(ExprKind::Max) |
                             bit(ExprKind::And) | bit(ExprKind::Or) | bit(ExprKind::BitAnd) |
                             bit(ExprKind::BitOr) | bit(ExprKind::BitXor) | bit(ExprKind::Shl) |
                             bit(ExprKind::Shr);
constexpr uint64_t kMinMax = bit(ExprKind::Min) | bit(ExprKind::Max);

/// The two operands of a binary node.
std::pair<Expr, Expr> operands(const Expr& e) {
  switch (e.kind()) {
#define EMBER_LOOP_BINARY(Name, Symbol, Cat) \
  case ExprKind::Name:                       \
    return {e.as<Name>()->a, e.as<Name>()->b};
#include "loop/nodes.def"
    default:
      return {};
  }
}

bool is_imm(const Expr& e) {
  return e.as<IntImm>() || e.as<FloatImm>();
}

/// `v` rounded to float type `t`, or nullopt where folding is not exact (f16, bf16).
std::optional<double> round_to(DType t, double v) {
  if (t == DType::Float64) return v;
  if (t == DType::Float32) return static_cast<double>(static_cast<float>(v));
  return std::nullopt;
}

// ---- constant folding ----------------------------------------------------------------------

Expr fold_int(const Expr& e, int64_t a, int64_t b) {
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  DType t = e.dtype();
  auto num = [&](uint64_t v) { return IntImm::make(t, wrap_int(t, static_cast<int64_t>(v))); };
  switch (e.kind()) {
    case ExprKind::Add:
      return num(u(a) + u(b));
    case ExprKind::Sub:
      return num(u(a) - u(b));
    case ExprKind::Mul:
      return num(u(a) * u(b));
    case ExprKind::FloorDiv:
      return b == 0 ? Expr() : num(u(floordiv_i64(a, b)));
    case ExprKind::Mod:
      return b == 0 ? Expr() : num(u(mod_i64(a, b)));
    case ExprKind::Min:
      return num(u(std::min(a, b)));
    case ExprKind::Max:
      return num(u(std::max(a, b)));
    case ExprKind::LT:
      return bool_imm(a < b);
    case ExprKind::LE:
      return bool_imm(a <= b);
    case ExprKind::EQ:
      return bool_imm(a == b);
    case ExprKind::NE:
      return bool_imm(a != b);
    case ExprKind::And:
      return bool_imm(a && b);
    case ExprKind::Or:
      return bool_imm(a || b);
    case ExprKind::BitAnd:
      return num(u(a & b));
    case ExprKind::BitOr:
      return num(u(a | b));
    case ExprKind::BitXor:
      return num(u(a ^ b));
    case ExprKind::Shl:
      return num(u(shl_int(t, a, b)));
    case ExprKind::Shr:
      return num(u(shr_int(t, a, b)));
    default:
      return {};
  }
}

Expr fold_float(const Expr& e, double a, double b) {
  DType t = e.dtype();
  auto num = [&](double v) -> Expr {
    auto r = round_to(t, v);
    return r ? FloatImm::make(t, *r) : Expr();
  };
  switch (e.kind()) {
    case ExprKind::Add:
      return num(a + b);
    case ExprKind::Sub:
      return num(a - b);
    case ExprKind::Mul:
      return num(a * b);
    case ExprKind::Div:
      return num(a / b);
    case ExprKind::Min:
    case ExprKind::Max: {
      if (std::isnan(a) || std::isnan(b)) return num(std::numeric_limits<double>::quiet_NaN());
      if (a == b && std::signbit(a) != std::signbit(b)) return {};  // -0.0 vs 0.0
      return num(e.kind() == ExprKind::Min ? std::min(a, b) : std::max(a, b));
    }
    case ExprKind::LT:
      return bool_imm(a < b);
    case ExprKind::LE:
      return bool_imm(a <= b);
    case ExprKind::EQ:
      return bool_imm(a == b);
    case ExprKind::NE:
      return bool_imm(a != b);
    default:
      return {};
  }
}

Expr fold_cast(DType t, const Expr& v) {
  if (const auto* i = v.as<IntImm>()) {
    if (is_int(t) || t == DType::Bool) return IntImm::make(t, wrap_int(t, i->value));
    auto r = round_to(t, static_cast<double>(i->value));
    return r ? FloatImm::make(t, *r) : Expr();
  }
  const auto* f = v.as<FloatImm>();
  if (f == nullptr) return {};
  if (t == DType::Bool) return bool_imm(f->value != 0);
  if (is_float(t)) {
    auto r = round_to(t, f->value);
    return r ? FloatImm::make(t, *r) : Expr();
  }
  // float -> int: only values whose truncation is in range (the rest is undefined).
  double x = std::trunc(f->value);
  if (!(x >= -9.2e18 && x <= 9.2e18)) return {};
  int64_t i = static_cast<int64_t>(x);
  return wrap_int(t, i) == i ? IntImm::make(t, i) : Expr();
}

Expr fold_constants(const Expr& e, const RuleContext&) {
  if (const auto* n = e.as<Not>()) {
    auto c = as_const_int(n->a);
    return c ? bool_imm(*c == 0) : Expr();
  }
  if (const auto* c = e.as<Cast>()) return fold_cast(e.dtype(), c->value);
  auto [a, b] = operands(e);
  if (!a.defined() || !is_imm(a) || !is_imm(b)) return {};
  if (a.as<IntImm>()) return fold_int(e, a.as<IntImm>()->value, b.as<IntImm>()->value);
  return fold_float(e, a.as<FloatImm>()->value, b.as<FloatImm>()->value);
}

// ---- integer arithmetic ----------------------------------------------------------------------

/// Whether `div` is `a // d` for the dividend `a` and constant divisor `d` of `rem` (`a % d`):
/// the same dividend and divisor, or, when `a` is itself `x // e` (e > 0), `x // (e * d)`, the
/// form div-mod-nested gives `(x // e) // d`.
/// Or `a` is what `div`'s dividend over e simplifies to, for div's divisor e * d: the nested
/// form after div-mod-linear took a multiple out of the inner quotient, ((p * 392 + r) // 56) % 56
/// as (p * 7 + r // 56) % 56 beside (p * 392 + r) // 3136, or the bounds dropped a part of it,
/// ((p * 32 + r) // 32) % 32 as p % 32 for 0 <= r < 32.
bool is_quotient_of(const FloorDiv& div, const Mod& rem, int64_t d, const RuleContext& ctx) {
  auto dd = as_const_int(div.b);
  if (!dd) return false;
  if (*dd == d && structurally_equal(div.a, rem.a)) return true;
  const auto* inner = rem.a.as<FloorDiv>();
  auto e = inner != nullptr ? as_const_int(inner->b) : std::nullopt;
  int64_t ed;
  if (e && *e > 0 && !__builtin_mul_overflow(*e, d, &ed) && ed == *dd &&
      structurally_equal(div.a, inner->a)) {
    return true;
  }
  if (d <= 0 || *dd <= d || *dd % d != 0) return false;
  const Expr outer = ctx.simplify(floordiv(div.a, IntImm::make(div.a.dtype(), *dd / d)));
  return structurally_equal(outer, rem.a);
}

/// Finds c*d*(a // d) + c*(a % d) among the terms and replaces the pair with c*a. A run of
/// index digits, `((r // 56) % 56) * 3584 + (r // 3136) * 200704 + (r % 56) * 64` (a row index
/// split into (n, h, w) and read back at channels-last strides), folds to `r * 64` this way:
/// the middle term is `((r // 56) // 56) * 3584 * 56` after div-mod-nested.
bool recombine_div_mod(Linear& l, const RuleContext& ctx) {
  for (size_t p = 0; p < l.terms.size(); ++p) {
    const auto* div = l.terms[p].first.as<FloorDiv>();
    if (div == nullptr) continue;
    for (size_t q = 0; q < l.terms.size(); ++q) {
      const auto* rem = l.terms[q].first.as<Mod>();
      auto d = rem != nullptr ? as_const_int(rem->b) : std::nullopt;
      int64_t c = l.terms[q].second, cd;
      if (rem == nullptr || !d || *d <= 0 || !is_quotient_of(*div, *rem, *d, ctx) ||
          __builtin_mul_overflow(c, *d, &cd) || cd != l.terms[p].second) {
        continue;
      }
      Expr a = rem->a;
      l.terms.erase(l.terms.begin() + std::max(p, q));
      l.terms.erase(l.terms.begin() + std::min(p, q));
      l.terms.push_back({a, c});
      return true;
    }
  }
  return false;
}

Expr linear_canonical(const Expr& e, const RuleContext& ctx) {
  if (e.dtype() != kIndexType) return {};
  auto l = linear_form(e);
  if (!l) return {};
  // The recombined term may itself be a sum: rebuild and take the linear form again.
  while (recombine_div_mod(*l, ctx)) {
    l = linear_form(rebuild(*l));
    if (!l) return {};
  }
  return rebuild(*l);
}

/// x + 0, x - 0, x * 1, x * 0, x - x for integer types other than i64 (i64 uses the linear form).
Expr int_identities(const Expr& e, const RuleContext&) {
  if (!is_int(e.dtype()) || e.dtype() == kIndexType) return {};
  auto [a, b] = operands(e);
  bool add = e.kind() == ExprKind::Add, sub = e.kind() == ExprKind::Sub;
  if ((add || sub) && is_const(b, 0)) return a;
  if (add && is_const(a, 0)) return b;
  if (e.kind() == ExprKind::Mul) {
    if (is_const(b, 1)) return a;
    if (is_const(a, 1)) return b;
    if (is_const(a, 0) || is_const(b, 0)) return IntImm::make(e.dtype(), 0);
  }
  if (sub && structurally_equal(a, b)) return IntImm::make(e.dtype(), 0);
  return {};
}

/// Exact float identities only: x * 1, 1 * x, x / 1, x - 0.0 (never x + 0.0: -0.0 + 0.0 is 0.0).
Expr float_identities(const Expr& e, const RuleContext&) {
  if (!is_float(e.dtype())) return {};
  auto [a, b] = operands(e);
  if (e.kind() == ExprKind::Mul || e.kind() == ExprKind::Div) {
    if (is_const(b, 1)) return a;
    if (e.kind() == ExprKind::Mul && is_const(a, 1)) return b;
  }
  if (e.kind() == ExprKind::Sub && is_const(b, 0) && !std::signbit(b.as<FloatImm>()->value)) {
    return a;
  }
  return {};
}

bool is_commutative(ExprKind k) {
  return k == ExprKind::Add || k == ExprKind::Mul || k == ExprKind::Min || k == ExprKind::Max ||
         k == ExprKind::EQ || k == ExprKind::NE || k == ExprKind::And || k == ExprKind::Or;
}

/// Commutative nodes put a constant operand on the right.
Expr commute_constant_right(const Expr& e, const RuleContext&) {
  auto [a, b] = operands(e);
  if (!is_commutative(e.kind()) || !is_imm(a) || is_imm(b)) return {};
  // Float min/max pick by `a < b`, so min(-0.0, 0.0) and min(0.0, -0.0) differ: keep the order.
  if (is_float(a.dtype()) && (e.kind() == ExprKind::Min || e.kind() == ExprKind::Max)) return {};
  return make_binary(e.kind(), b, a);
}

/// Commutative integer and boolean nodes order non-constant operands by term_key (i64 sums are
/// ordered by linear-canonical instead).
Expr sort_commutative(const Expr& e, const RuleContext&) {
  auto [a, b] = operands(e);
  if (!is_commutative(e.kind()) || is_float(a.dtype()) || is_imm(a) || is_imm(b)) return {};
  if (e.kind() == ExprKind::Add && e.dtype() == kIndexType) return {};  // linear-canonical's job
  return term_key(b) < term_key(a) ? make_binary(e.kind(), b, a) : Expr();
}

Expr div_mod_by_one(const Expr& e, const RuleContext&) {
  auto [a, b] = operands(e);
  if (!is_const(b, 1)) return {};
  return e.kind() == ExprKind::FloorDiv ? a : IntImm::make(e.dtype(), 0);
}

/// (d*Q + R) // d == Q + R // d, and R // d == k when bounds put R in [k*d, (k+1)*d). Also
/// (d*Q + R) % d == R % d, and R % d == R - k*d under the same bounds. For i64, d > 0.
Expr div_mod_linear(const Expr& e, const RuleContext& ctx) {
  auto [a, b] = operands(e);
  auto d = as_const_int(b);
  if (e.dtype() != kIndexType || !d || *d <= 0) return {};
  auto l = linear_form(a);
  if (!l) return {};
  Linear q, r;
  for (const auto& [term, coeff] : l->terms) {
    if (coeff % *d == 0) {
      q.terms.push_back({term, coeff / *d});
    } else {
      r.terms.push_back({term, coeff});
    }
  }
  // Constants split off too when there is a quotient (FloorDiv) or always (Mod).
  bool split = !q.terms.empty();
  bool is_mod = e.kind() == ExprKind::Mod;
  q.constant = split ? floordiv_i64(l->constant, *d) : 0;
  r.constant = split || is_mod ? mod_i64(l->constant, *d) : l->constant;
  Expr rest = rebuild(r);
  Interval rb = bounds_of(rest, ctx.bounds);
  std::optional<int64_t> k;
  if (rb.is_bounded() && floordiv_i64(*rb.lo, *d) == floordiv_i64(*rb.hi, *d)) {
    k = floordiv_i64(*rb.lo, *d);
  }
  if (!is_mod) {
    if (k) return ctx.simplify(rebuild(q) + *k);
    return split ? ctx.simplify(rebuild(q) + floordiv(rest, b)) : Expr();
  }
  if (k) return ctx.simplify(rest - *k * *d);
  return split || r.constant != l->constant ? ctx.simplify(mod(rest, b)) : Expr();
}

/// (x // a) // b == x // (a * b) and (x % a) % b == x % b when b divides a; a, b > 0.
Expr div_mod_nested(const Expr& e, const RuleContext&) {
  auto [a, b] = operands(e);
  auto [x, inner] = operands(a);
  if (a.kind() != e.kind()) return {};
  auto c1 = as_const_int(inner), c2 = as_const_int(b);
  int64_t prod;
  if (!c1 || !c2 || *c1 <= 0 || *c2 <= 0) return {};
  if (e.kind() == ExprKind::FloorDiv) {
    if (__builtin_mul_overflow(*c1, *c2, &prod)) return {};
    return floordiv(x, IntImm::make(e.dtype(), prod));
  }
  return *c1 % *c2 == 0 ? mod(x, b) : Expr();
}

// ---- min, max and comparisons --------------------------------------------------------------

Expr min_max_self(const Expr& e, const RuleContext&) {
  auto [a, b] = operands(e);
  return structurally_equal(a, b) ? a : Expr();
}

Expr min_max_by_bounds(const Expr& e, const RuleContext& ctx) {
  auto [a, b] = operands(e);
  if (!is_int(e.dtype())) return {};
  Interval x = bounds_of(a, ctx.bounds), y = bounds_of(b, ctx.bounds);
  bool a_le_b = x.hi && y.lo && *x.hi <= *y.lo;
  bool b_le_a = y.hi && x.lo && *y.hi <= *x.lo;
  if (e.kind() == ExprKind::Min) return a_le_b ? a : b_le_a ? b : Expr();
  return a_le_b ? b : b_le_a ? a : Expr();
}

/// Decides integer comparisons from the bounds of a - b (for i64, a - b is simplified first,
/// so x + 3 < x + 5 is decided without bounds on x).
Expr compare_by_bounds(const Expr& e, const RuleContext& ctx) {
  auto [a, b] = operands(e);
  if (!is_int(a.dtype())) return {};
  Interval diff;
  if (a.dtype() == kIndexType) {
    Expr d = ctx.simplify(a - b);
    diff = bounds_of(d, ctx.bounds);
    // Loop variables with symbolic ranges: put each at the end of its range that maximizes
    // (or minimizes) the difference; decides i < n inside for (i, 0, n).
    auto l = linear_form(d);
    if (l && !ctx.ranges.empty()) {
      Linear hi = *l, lo = *l;
      bool any = false;
      for (size_t t = 0; t < l->terms.size(); ++t) {
        const auto* v = l->terms[t].first.as<Var>();
        auto it = v ? ctx.ranges.find(v->name) : ctx.ranges.end();
        if (it == ctx.ranges.end()) continue;
        bool up = l->terms[t].second > 0;
        hi.terms[t].first = up ? it->second.max : it->second.min;
        lo.terms[t].first = up ? it->second.min : it->second.max;
        any = true;
      }
      if (any) {
        Interval h = bounds_of(ctx.simplify(rebuild(hi)), ctx.bounds);
        Interval w = bounds_of(ctx.simplify(rebuild(lo)), ctx.bounds);
        if (h.hi && (!diff.hi || *h.hi < *diff.hi)) diff.hi = h.hi;
        if (w.lo && (!diff.lo || *w.lo > *diff.lo)) diff.lo = w.lo;
      }
    }
  } else {
    Interval x = bounds_of(a, ctx.bounds), y = bounds_of(b, ctx.bounds);
    if (x.lo && y.hi) diff.lo = *x.lo - *y.hi;  // narrow types: no overflow in i64
    if (x.hi && y.lo) diff.hi = *x.hi - *y.lo;
  }
  auto lo = diff.lo, hi = diff.hi;
  switch (e.kind()) {
    case ExprKind::LT:
      return hi && *hi < 0 ? bool_imm(true) : lo && *lo >= 0 ? bool_imm(false) : Expr();
    case ExprKind::LE:
      return hi && *hi <= 0 ? bool_imm(true) : lo && *lo > 0 ? bool_imm(false) : Expr();
    case ExprKind::EQ:
    case ExprKind::NE: {
      bool ne = e.kind() == ExprKind::NE;
      if (diff.is_point() && *lo == 0) return bool_imm(!ne);
      if ((lo && *lo > 0) || (hi && *hi < 0)) return bool_imm(ne);
      return {};
    }
    default:
      return {};
  }
}

// ---- logic and select ------------------------------------------------------------------------

Expr logical_identities(const Expr& e, const RuleContext&) {
  auto [a, b] = operands(e);
  bool is_and = e.kind() == ExprKind::And;
  if (auto c = as_const_int(b)) return (*c != 0) == is_and ? a : b;  // x && true, x || false
  return structurally_equal(a, b) ? a : Expr();
}

Expr not_rules(const Expr& e, const RuleContext&) {
  const Expr& a = e.as<Not>()->a;
  if (const auto* inner = a.as<Not>()) return inner->a;
  auto [x, y] = operands(a);
  switch (a.kind()) {
    case ExprKind::EQ:
      return NE::make(x, y);
    case ExprKind::NE:
      return EQ::make(x, y);
    // !(x < y) == (y <= x) fails for NaN, so only for integers.
    case ExprKind::LT:
      return is_int(x.dtype()) ? LE::make(y, x) : Expr();
    case ExprKind::LE:
      return is_int(x.dtype()) ? LT::make(y, x) : Expr();
    default:
      return {};
  }
}

Expr select_rules(const Expr& e, const RuleContext&) {
  const auto* s = e.as<Select>();
  if (auto c = as_const_int(s->cond)) return *c ? s->t : s->f;
  if (structurally_equal(s->t, s->f)) return s->t;
  if (const auto* n = s->cond.as<Not>()) return Select::make(n->a, s->f, s->t);
  return {};
}

Expr cast_same_type(const Expr& e, const RuleContext&) {
  const Expr& v = e.as<Cast>()->value;
  return v.dtype() == e.dtype() ? v : Expr();
}

/// check_index(x, lo, hi) -> x where the bounds prove lo <= x < hi.
Expr check_index_by_bounds(const Expr& e, const RuleContext& ctx) {
  const auto* c = e.as<Call>();
  if (c->fn != CallFn::CheckIndex) return Expr();
  const Interval x = bounds_of(c->args[0], ctx.bounds);
  const std::optional<int64_t> lo = as_const_int(c->args[1]), hi = as_const_int(c->args[2]);
  if (!x.is_bounded() || !lo || !hi || *x.lo < *lo || *x.hi >= *hi) return Expr();
  return c->args[0];
}

}  // namespace

const std::vector<Rule>& rules() {
  static const std::vector<Rule> kRules = {
      {"fold-constants", kBinary | bit(ExprKind::Not) | bit(ExprKind::Cast), fold_constants},
      {"linear-canonical", kArith, linear_canonical},
      {"int-identities", kArith, int_identities},
      {"float-identities", kArith | bit(ExprKind::Div), float_identities},
      {"commute-constant-right", kBinary, commute_constant_right},
      {"sort-commutative", kBinary, sort_commutative},
      {"div-mod-by-one", bit(ExprKind::FloorDiv) | bit(ExprKind::Mod), div_mod_by_one},
      {"div-mod-nested", bit(ExprKind::FloorDiv) | bit(ExprKind::Mod), div_mod_nested},
      {"div-mod-linear", bit(ExprKind::FloorDiv) | bit(ExprKind::Mod), div_mod_linear},
      {"min-max-self", kMinMax, min_max_self},
      {"min-max-by-bounds", kMinMax, min_max_by_bounds},
      {"compare-by-bounds", kCompare, compare_by_bounds},
      {"logical-identities", bit(ExprKind::And) | bit(ExprKind::Or), logical_identities},
      {"not-rules", bit(ExprKind::Not), not_rules},
      {"select-rules", bit(ExprKind::Select), select_rules},
      {"cast-same-type", bit(ExprKind::Cast), cast_same_type},
      {"check-index-by-bounds", bit(ExprKind::Call), check_index_by_bounds},
  };
  return kRules;
}

}  // namespace ember::loop::simplify_internal
