#include "loop/split_loops.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loop/traverse.h"

namespace ember::loop {

namespace {

// Where a comparison of `var` with a constant changes value: the first `var` for which it holds
// differently than for the one before (`v < c` and `c <= v` change at c, `v <= c` and `c < v` at
// c + 1), and whether it holds below that point (`var` on the left).
struct Change {
  int64_t at = 0;
  bool holds_below = false;
};

std::optional<Change> change_of(const Expr& cond, const std::string& var) {
  const ExprKind k = cond.kind();
  if (k != ExprKind::LT && k != ExprKind::LE) return std::nullopt;
  Expr a, b;
  for_each_child(cond, [&](const Expr& c) { (a.defined() ? b : a) = c; });
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

void collect_points(const Expr& e, const std::string& var, std::set<int64_t>& points) {
  if (const Select* s = e.as<Select>()) {
    if (std::optional<Change> c = change_of(s->cond, var)) points.insert(c->at);
  }
  for_each_child(e, [&](const Expr& c) { collect_points(c, var, points); });
}

void collect_points(const Stmt& s, const std::string& var, std::set<int64_t>& points) {
  for_each_stmt_child(
      s, [&](const Expr& e) { collect_points(e, var, points); },
      [&](const Stmt& c) { collect_points(c, var, points); });
}

// `e` with each select on `var` that is decided over [lo, hi) replaced by its arm.
Expr fold(const Expr& e, const std::string& var, int64_t lo, int64_t hi) {
  if (const Select* s = e.as<Select>()) {
    if (std::optional<Change> c = change_of(s->cond, var)) {
      if (hi <= c->at) return fold(c->holds_below ? s->t : s->f, var, lo, hi);
      if (lo >= c->at) return fold(c->holds_below ? s->f : s->t, var, lo, hi);
    }
  }
  return map_children(e, [&](const Expr& c) { return fold(c, var, lo, hi); });
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
