#include "loop/collapse.h"

#include <functional>
#include <map>
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

}  // namespace

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
