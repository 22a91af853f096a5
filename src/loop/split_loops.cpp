#include "loop/split_loops.h"

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loop/traverse.h"

namespace ember::loop {

namespace {

// Where a comparison of `var` with a constant changes value: the first `var` for which it holds
// differently than for the one before (`v < c` and `c <= v` change at c, `v <= c` and `c < v` at
// c + 1), and whether it holds below that point (`var` on the left).
// The two operands of a binary node.
std::pair<Expr, Expr> operands(const Expr& e) {
  std::pair<Expr, Expr> ab;
  for_each_child(e, [&](const Expr& c) { (ab.first.defined() ? ab.second : ab.first) = c; });
  return ab;
}

struct Change {
  int64_t at = 0;
  bool holds_below = false;
};

std::optional<Change> change_of(const Expr& cond, const std::string& var) {
  const ExprKind k = cond.kind();
  if (k != ExprKind::LT && k != ExprKind::LE) return std::nullopt;
  const auto [a, b] = operands(cond);
  auto is_var = [&](const Expr& e) {
    const Var* v = e.as<Var>();
    return v != nullptr && v->name == var;
  };
  const IntImm* ca = a.as<IntImm>();
  const IntImm* cb = b.as<IntImm>();
  if (is_var(a) && cb != nullptr)
    return Change{k == ExprKind::LT ? cb->value : cb->value + 1, true};
  if (ca != nullptr && is_var(b))
    return Change{k == ExprKind::LE ? ca->value : ca->value + 1, false};
  return std::nullopt;
}

// Change points of the comparisons on `var` that decide a select: its condition, or a
// conjunction or disjunction of them (a padding's `c0 <= i && i < c1`).
void collect_condition_points(const Expr& cond, const std::string& var, std::set<int64_t>& points) {
  if (std::optional<Change> c = change_of(cond, var)) {
    points.insert(c->at);
  } else if (cond.kind() == ExprKind::And || cond.kind() == ExprKind::Or) {
    for_each_child(cond, [&](const Expr& c) { collect_condition_points(c, var, points); });
  }
}

void collect_points(const Expr& e, const std::string& var, std::set<int64_t>& points) {
  if (const Select* s = e.as<Select>()) collect_condition_points(s->cond, var, points);
  for_each_child(e, [&](const Expr& c) { collect_points(c, var, points); });
}

void collect_points(const Stmt& s, const std::string& var, std::set<int64_t>& points) {
  for_each_stmt_child(
      s, [&](const Expr& e) { collect_points(e, var, points); },
      [&](const Stmt& c) { collect_points(c, var, points); });
}

// `e` with each comparison on `var` that is decided over [lo, hi) replaced by its value, and the
// selects, conjunctions and disjunctions that decides replaced by what they come to.
Expr fold(const Expr& e, const std::string& var, int64_t lo, int64_t hi) {
  if (std::optional<Change> c = change_of(e, var)) {
    if (hi <= c->at) return bool_imm(c->holds_below);
    if (lo >= c->at) return bool_imm(!c->holds_below);
    return e;
  }
  const Expr folded = map_children(e, [&](const Expr& c) { return fold(c, var, lo, hi); });
  auto constant = [](const Expr& x) -> std::optional<bool> {
    if (const IntImm* i = x.as<IntImm>(); i != nullptr && x.dtype() == DType::Bool) {
      return i->value != 0;
    }
    return std::nullopt;
  };
  if (const Select* s = folded.as<Select>()) {
    if (std::optional<bool> c = constant(s->cond)) return *c ? s->t : s->f;
  } else if (folded.kind() == ExprKind::And || folded.kind() == ExprKind::Or) {
    const bool is_and = folded.kind() == ExprKind::And;
    const auto [a, b] = operands(folded);
    // x && true = x, x && false = false; x || false = x, x || true = true.
    if (std::optional<bool> ca = constant(a)) return *ca == is_and ? b : a;
    if (std::optional<bool> cb = constant(b)) return *cb == is_and ? a : b;
  }
  return folded;
}

Stmt fold(const Stmt& s, const std::string& var, int64_t lo, int64_t hi) {
  return map_stmt_children(
      s, [&](const Expr& e) { return fold(e, var, lo, hi); },
      [&](const Stmt& c) { return fold(c, var, lo, hi); });
}

}  // namespace

Stmt split_loops_at_selects(const Stmt& s) {
  if (!s.defined()) return s;
  if (const For* f = s.as<For>()) {
    const IntImm* mn = f->min.as<IntImm>();
    const IntImm* ext = f->extent.as<IntImm>();
    if (f->for_kind != ForKind::Parallel && mn != nullptr && ext != nullptr) {
      const std::string& var = f->var.as<Var>()->name;
      std::set<int64_t> found;
      collect_points(f->body, var, found);
      const int64_t lo = mn->value, hi = mn->value + ext->value;
      std::vector<int64_t> cuts = {lo};
      for (int64_t p : found) {
        if (p > lo && p < hi) cuts.push_back(p);
      }
      cuts.push_back(hi);
      if (cuts.size() > 2 && static_cast<int>(cuts.size()) - 1 <= kMaxPieces) {
        std::vector<Stmt> pieces;
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          const Stmt body = split_loops_at_selects(fold(f->body, var, cuts[i], cuts[i + 1]));
          pieces.push_back(f->with(IntImm::make(DType::Int64, cuts[i]),
                                   IntImm::make(DType::Int64, cuts[i + 1] - cuts[i]), body));
        }
        return Block::make(std::move(pieces));
      }
    }
  }
  return map_stmt_children(
      s, [](const Expr& e) { return e; }, [](const Stmt& c) { return split_loops_at_selects(c); });
}

}  // namespace ember::loop
