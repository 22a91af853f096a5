#include "loop/simplify.h"

#include <algorithm>

#include "loop/equality.h"
#include "loop/printer.h"
#include "loop/simplify_internal.h"
#include "loop/traverse.h"
#include "support/error.h"

namespace ember::loop {

int SimplifyStats::total() const {
  int n = 0;
  for (const auto& [name, count] : rule_counts) n += count;
  return n;
}

namespace simplify_internal {
namespace {

bool collect(const Expr& e, int64_t scale, Linear& out) {
  if (auto c = as_const_int(e)) {
    int64_t p;
    return !__builtin_mul_overflow(*c, scale, &p) &&
           !__builtin_add_overflow(out.constant, p, &out.constant);
  }
  if (const auto* n = e.as<Add>()) return collect(n->a, scale, out) && collect(n->b, scale, out);
  if (const auto* n = e.as<Sub>()) {
    return scale != INT64_MIN && collect(n->a, scale, out) && collect(n->b, -scale, out);
  }
  if (const auto* n = e.as<Mul>()) {
    int64_t p;
    if (auto c = as_const_int(n->b)) {
      return !__builtin_mul_overflow(*c, scale, &p) && collect(n->a, p, out);
    }
    if (auto c = as_const_int(n->a)) {
      return !__builtin_mul_overflow(*c, scale, &p) && collect(n->b, p, out);
    }
  }
  out.terms.push_back({e, scale});
  return true;
}

/// `coeff * term` without the multiplication when coeff is 1.
Expr scaled(const Expr& term, int64_t coeff) {
  return coeff == 1 ? term : term * coeff;
}

}  // namespace

std::string term_key(const Expr& e) {
  if (const Var* v = e.as<Var>()) return "0" + v->name;  // as printed
  bool symbol = e.as<SizeVar>();
  return (symbol ? "0" : "1") + print_expr(e);
}

std::optional<Linear> linear_form(const Expr& e) {
  Linear raw;
  if (!collect(e, 1, raw)) return std::nullopt;
  std::vector<std::pair<std::string, size_t>> keys;
  for (size_t i = 0; i < raw.terms.size(); ++i) keys.push_back({term_key(raw.terms[i].first), i});
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  Linear out;
  out.constant = raw.constant;
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto& [term, coeff] = raw.terms[keys[k].second];
    if (!out.terms.empty() && k > 0 && keys[k - 1].first == keys[k].first &&
        structurally_equal(out.terms.back().first, term)) {
      if (__builtin_add_overflow(out.terms.back().second, coeff, &out.terms.back().second)) {
        return std::nullopt;
      }
    } else {
      out.terms.push_back({term, coeff});
    }
  }
  std::erase_if(out.terms, [](const auto& t) { return t.second == 0; });
  return out;
}

Expr rebuild(const Linear& l) {
  Expr acc;
  std::vector<std::pair<Expr, int64_t>> negative;
  for (const auto& [term, coeff] : l.terms) {
    if (coeff < 0) {
      negative.push_back({term, coeff});
    } else {
      acc = acc.defined() ? acc + scaled(term, coeff) : scaled(term, coeff);
    }
  }
  bool constant_used = false;
  size_t first_negative = 0;
  if (!acc.defined()) {
    if (l.constant != 0 || negative.empty()) {
      acc = idx(l.constant);
      constant_used = true;
    } else {
      acc = negative[0].first * negative[0].second;
      first_negative = 1;
    }
  }
  for (size_t i = first_negative; i < negative.size(); ++i) {
    const auto& [term, coeff] = negative[i];
    acc = coeff == INT64_MIN ? acc + term * coeff : acc - scaled(term, -coeff);
  }
  if (!constant_used && l.constant != 0) {
    acc = l.constant > 0 || l.constant == INT64_MIN ? acc + l.constant : acc - (-l.constant);
  }
  return acc;
}

}  // namespace simplify_internal

namespace {

using simplify_internal::RuleContext;

class Simplifier {
 public:
  Simplifier(VarBounds bounds, SimplifyStats* stats) : bounds_(std::move(bounds)), stats_(stats) {}

  Expr expr(const Expr& e) {
    Expr cur = map_children(e, [&](const Expr& c) { return expr(c); });
    RuleContext ctx{bounds_, ranges_, [&](const Expr& x) { return expr(x); }};
    // Each rule moves toward the canonical form; the cap only guards against a rule bug.
    for (int iter = 0; iter < 64; ++iter) {
      Expr next;
      for (const auto& rule : simplify_internal::rules()) {
        if (!(rule.kinds & (uint64_t{1} << static_cast<int>(cur.kind())))) continue;
        next = rule.apply(cur, ctx);
        if (next.defined() && !structurally_equal(next, cur)) {
          if (stats_ != nullptr) ++stats_->rule_counts[rule.name];
          break;
        }
        next = Expr();
      }
      if (!next.defined()) return cur;
      cur = map_children(next, [&](const Expr& c) { return expr(c); });
    }
    EMBER_INTERNAL_ASSERT(false) << "simplify does not converge on " << e;
    return cur;
  }

  Stmt stmt(const Stmt& s) {
    auto fe = [&](const Expr& e) { return expr(e); };
    auto fs = [&](const Stmt& c) { return stmt(c); };
    if (const auto* n = s.as<For>()) {
      Expr mn = expr(n->min), ext = expr(n->extent);
      if (auto c = as_const_int(ext); c && *c <= 0) return Block::make({});
      const std::string& name = n->var.as<Var>()->name;
      bounds_[name] = loop_var_bounds(bounds_of(mn, bounds_), bounds_of(ext, bounds_));
      ranges_[name] = {mn, expr(mn + ext - 1)};
      Stmt body = stmt(n->body);
      bounds_.erase(name);
      ranges_.erase(name);
      if (mn.same_as(n->min) && ext.same_as(n->extent) && body.same_as(n->body)) return s;
      return n->with(mn, ext, body);
    }
    if (const auto* n = s.as<Let>()) {
      Expr v = expr(n->value);
      const std::string& name = n->var.as<Var>()->name;
      bounds_[name] = bounds_of(v, bounds_);
      Stmt body = stmt(n->body);
      bounds_.erase(name);
      if (v.same_as(n->value) && body.same_as(n->body)) return s;
      return Let::make(n->var, v, body);
    }
    if (const auto* n = s.as<IfThenElse>()) {
      Expr c = expr(n->cond);
      if (auto k = as_const_int(c)) {
        if (*k) return stmt(n->then_case);
        return n->else_case.defined() ? stmt(n->else_case) : Block::make({});
      }
    }
    return map_stmt_children(s, fe, fs);
  }

 private:
  VarBounds bounds_;
  std::map<std::string, simplify_internal::SymbolicRange> ranges_;
  SimplifyStats* stats_;
};

}  // namespace

Expr simplify(const Expr& e, const VarBounds& bounds, SimplifyStats* stats) {
  return Simplifier(bounds, stats).expr(e);
}

Stmt simplify(const Stmt& s, SimplifyStats* stats) {
  return Simplifier({}, stats).stmt(s);
}

Kernel simplify(const Kernel& k, SimplifyStats* stats) {
  Simplifier simplifier({}, stats);
  Kernel out = k;
  for (BufferParam& p : out.buffers) {
    for (Expr& e : p.sizes) e = simplifier.expr(e);
    for (Expr& e : p.strides) e = simplifier.expr(e);
  }
  out.body = simplifier.stmt(k.body);
  return out;
}

std::optional<std::vector<int64_t>> affine_coefficients(const Expr& index,
                                                        const std::vector<std::string>& vars) {
  auto at = [&](size_t var, int64_t value) -> std::optional<int64_t> {
    std::map<std::string, Expr> values;
    for (size_t i = 0; i < vars.size(); ++i) {
      values[vars[i]] = IntImm::make(kIndexType, i == var ? value : 0);
    }
    Expr e = simplify(substitute(index, values));
    if (const auto* c = e.as<IntImm>()) return c->value;
    return std::nullopt;
  };
  std::optional<int64_t> base = at(vars.size(), 0);
  if (!base) return std::nullopt;
  std::vector<int64_t> coef(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    std::optional<int64_t> one = at(i, 1), three = at(i, 3);
    if (!one || !three || *three - *base != 3 * (*one - *base)) return std::nullopt;
    coef[i] = *one - *base;
  }
  return coef;
}

}  // namespace ember::loop
