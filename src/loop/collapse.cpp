#include "loop/collapse.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loop/simplify.h"
#include "loop/traverse.h"

namespace ember::loop {

namespace {

// Floor divisions and remainders in `s`.
int count_div_mod(const Stmt& s) {
  int n = 0;
  std::function<void(const Expr&)> expr = [&](const Expr& e) {
    if (e.kind() == ExprKind::FloorDiv || e.kind() == ExprKind::Mod) ++n;
    for_each_child(e, expr);
  };
  std::function<void(const Stmt&)> stmt = [&](const Stmt& c) {
    for_each_stmt_child(c, expr, stmt);
  };
  stmt(s);
  return n;
}

bool constant_from_zero(const For& f) {
  const auto* mn = f.min.as<IntImm>();
  const auto* ext = f.extent.as<IntImm>();
  return mn != nullptr && mn->value == 0 && ext != nullptr && ext->value > 0;
}

struct Loop {
  Expr var, extent;
  ForKind kind;
  Expr parallel_when;
};

Stmt nest_of(const std::vector<Loop>& loops, Stmt body) {
  for (size_t i = loops.size(); i-- > 0;) {
    const Loop& l = loops[i];
    body = For::make(l.var, IntImm::make(kIndexType, 0), l.extent, l.kind, body,
                     l.kind == ForKind::Parallel ? l.parallel_when : Expr());
  }
  return body;
}

// Whether `s` accumulates, and only into elements that neither loop variable picks (a reduction
// over both loops; a column reduction's accumulators are indexed by the vector loop's variable).
bool reduces_over(const Stmt& s, const std::string& a, const std::string& b) {
  int accumulates = 0;
  bool other = false;
  std::function<void(const Stmt&)> walk = [&](const Stmt& c) {
    if (const Accumulate* acc = c.as<Accumulate>()) {
      ++accumulates;
      std::set<std::string> vars;
      collect_vars(acc->index, vars);
      other = other || vars.count(a) > 0 || vars.count(b) > 0;
      return;
    }
    for_each_stmt_child(
        c, [](const Expr&) {}, walk);
  };
  walk(s);
  return accumulates > 0 && !other;
}

// `f` merged with the vectorized loop that is its whole body, or an undefined Stmt when the pair
// does not qualify (collapse_reduction_nests).
Stmt merge_reduction_pair(const For& f, int64_t max_inner) {
  if (f.for_kind != ForKind::Serial || !constant_from_zero(f)) return Stmt();
  const For* in = f.body.as<For>();
  if (in == nullptr || in->for_kind != ForKind::Vectorized || !constant_from_zero(*in)) {
    return Stmt();
  }
  const int64_t a = f.extent.as<IntImm>()->value, b = in->extent.as<IntImm>()->value;
  int64_t ab;
  if (b > max_inner || __builtin_mul_overflow(a, b, &ab)) return Stmt();
  const std::string& a_name = f.var.as<Var>()->name;
  const std::string& b_name = in->var.as<Var>()->name;
  if (has_loop(in->body) || !reduces_over(in->body, a_name, b_name)) return Stmt();
  const Expr bb = IntImm::make(kIndexType, b);
  const Stmt body = substitute(in->body, {{a_name, floordiv(f.var, bb)}, {b_name, mod(f.var, bb)}});
  return simplify(For::make(f.var, IntImm::make(kIndexType, 0), IntImm::make(kIndexType, ab),
                            ForKind::Vectorized, body));
}

}  // namespace

Stmt collapse_reduction_nests(const Stmt& s, int64_t max_inner) {
  if (const For* f = s.as<For>()) {
    Stmt merged = merge_reduction_pair(*f, max_inner);
    if (merged.defined()) return merged;
  }
  Stmt out = map_stmt_children(
      s, [](const Expr& e) { return e; },
      [&](const Stmt& c) { return collapse_reduction_nests(c, max_inner); });
  // A loop whose body just became a short merged vector loop may merge in turn.
  if (out.get() != s.get()) {
    if (const For* f = out.as<For>()) {
      Stmt merged = merge_reduction_pair(*f, max_inner);
      if (merged.defined()) return merged;
    }
  }
  return out;
}

Stmt collapse_loops(const Stmt& s) {
  std::vector<Loop> loops;
  Stmt body = s;
  while (const For* f = body.as<For>()) {
    if (!constant_from_zero(*f)) return s;
    loops.push_back({f->var, f->extent, f->for_kind, f->parallel_when});
    body = f->body;
  }
  if (loops.size() < 2 || has_loop(body)) return s;
  bool changed = false;
  for (size_t i = loops.size() - 1; i > 0; --i) {
    // Merge loops[i - 1] (outer) and loops[i] (inner), judged by the body under those two only.
    const Loop& outer = loops[i - 1];
    const Loop& inner = loops[i];
    const int64_t a = outer.extent.as<IntImm>()->value, b = inner.extent.as<IntImm>()->value;
    int64_t ab;
    if (__builtin_mul_overflow(a, b, &ab)) continue;
    const Stmt before = simplify(nest_of({outer, inner}, body));
    const std::string& a_name = outer.var.as<Var>()->name;
    const std::string& b_name = inner.var.as<Var>()->name;
    const Expr bb = IntImm::make(kIndexType, b);
    Stmt merged_body =
        substitute(body, {{a_name, floordiv(outer.var, bb)}, {b_name, mod(outer.var, bb)}});
    const Loop merged{outer.var, IntImm::make(kIndexType, ab), inner.kind,
                      inner.parallel_when.defined() ? inner.parallel_when : outer.parallel_when};
    const Stmt after = simplify(nest_of({merged}, merged_body));
    // One more division or remainder in the body still pays: a flattened nest recovers each loop
    // variable but the outermost with one of each.
    if (after.as<For>() == nullptr || count_div_mod(after) > count_div_mod(before) + 1) continue;
    body = after.as<For>()->body;
    loops[i - 1] = merged;
    loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(i));
    changed = true;
  }
  return changed ? nest_of(loops, body) : s;
}

}  // namespace ember::loop
