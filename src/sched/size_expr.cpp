#include "sched/size_expr.h"

#include <algorithm>
#include <functional>

#include "loop/traverse.h"
#include "support/error.h"
#include "sym/eval.h"
#include "sym/range.h"

namespace ember::sched {

namespace {

loop::Expr atom_to_loop(const sym::AtomNode& a, std::set<sym::SymbolId>& used) {
  if (a.kind == sym::AtomKind::Symbol) {
    used.insert(a.id);
    return loop::SizeVar::make(a.name);
  }
  loop::Expr l = to_loop_expr(a.lhs, used);
  loop::Expr r = to_loop_expr(a.rhs, used);
  switch (a.kind) {
    case sym::AtomKind::FloorDiv:
      return loop::floordiv(l, r);
    case sym::AtomKind::Mod:
      return loop::mod(l, r);
    case sym::AtomKind::Min:
      return loop::min(l, r);
    case sym::AtomKind::Max:
      return loop::max(l, r);
    case sym::AtomKind::Symbol:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << "unknown atom kind";
  return {};
}

}  // namespace

loop::Expr to_loop_expr(const sym::SymExpr& e, std::set<sym::SymbolId>& used) {
  const sym::ExprNode& n = e.node();
  std::optional<loop::Expr> sum;
  for (const sym::Term& t : n.terms) {
    std::optional<loop::Expr> term;
    for (const sym::Factor& f : t.factors) {
      loop::Expr a = atom_to_loop(*f.atom, used);
      for (int64_t p = 0; p < f.power; ++p) term = term ? *term * a : a;
    }
    loop::Expr x = t.coeff == 1 ? *term : *term * loop::idx(t.coeff);
    sum = sum ? *sum + x : x;
  }
  if (!sum) return loop::idx(n.constant);
  return n.constant == 0 ? *sum : *sum + loop::idx(n.constant);
}

loop::Expr dim_expr(const graph::DimExpr& d) {
  if (std::optional<int64_t> c = d.as_constant()) return loop::idx(*c);
  std::set<sym::SymbolId> used;
  return to_loop_expr(d.expr(), used);
}

std::vector<std::string> kernel_size_vars(const loop::Kernel& k, const sym::ShapeEnv& symbols) {
  std::set<std::string> names;
  std::function<void(const loop::Expr&)> walk = [&](const loop::Expr& e) {
    if (const auto* s = e.as<loop::SizeVar>()) names.insert(s->name);
    loop::for_each_child(e, walk);
  };
  std::function<void(const loop::Stmt&)> walk_stmt = [&](const loop::Stmt& s) {
    loop::for_each_stmt_child(s, walk, walk_stmt);
  };
  walk_stmt(k.body);
  for (const loop::BufferParam& b : k.buffers) {
    for (const loop::Expr& e : b.sizes) walk(e);
    for (const loop::Expr& e : b.strides) walk(e);
  }
  std::vector<std::pair<sym::SymbolId, std::string>> by_id;
  for (const std::string& n : names) {
    const auto* info = symbols.find(n);
    EMBER_INTERNAL_ASSERT(info != nullptr) << "kernel " << k.name << " reads unknown size " << n;
    by_id.emplace_back(info->id, n);
  }
  std::sort(by_id.begin(), by_id.end());
  std::vector<std::string> out;
  for (auto& [id, n] : by_id) out.push_back(std::move(n));
  return out;
}

int64_t hint_of(const graph::DimExpr& d, const sym::ShapeEnv& symbols) {
  std::optional<int64_t> c = d.as_constant();
  return c ? *c : sym::hint(d.expr(), symbols);
}

// Note [Parallel loops over symbols]
// A static kernel's outer loop runs in parallel (OpenMP) from ScheduleOptions::parallel_threshold
// elements; below it the fork and join cost more than they save. A kernel over shape symbols is
// compiled once, at the sizes of the call that compiled it (the hints), and runs at every size
// after: decided at the hints, a graph first called with 16 tokens ran its kernels serially at
// 256 and 512 too (a GPT-2 layer at 256 tokens: 10.5 ms against the static graph's 6.8). So the
// decision takes the largest size the symbols' ranges allow, which for an unbounded symbol means
// parallel. At small sizes that cost the fork and join of a warm OpenMP team per kernel (a GPT-2
// layer at width 32 and 8 tokens: 9 us of a 45 us call), so the loop carries its condition
// (loop::For::parallel_when, `threshold <= numel`): the C++ emitter makes it the region's `if`
// clause, and a call at a small size runs the loop on its own thread.
int64_t largest_numel(const graph::Dims& sizes, const sym::ShapeEnv& symbols) {
  const graph::DimExpr n = graph::sym_numel(sizes);
  if (std::optional<int64_t> c = n.as_constant()) return *c;
  return sym::range_of(n.expr(), symbols).hi;  // kPosInf (INT64_MAX) when unbounded
}

loop::Expr parallel_when(const graph::DimExpr& work, int64_t threshold,
                         const sym::ShapeEnv& symbols) {
  if (work.is_constant() || sym::range_of(work.expr(), symbols).lo >= threshold) return {};
  return loop::make_binary(loop::ExprKind::LE, loop::idx(threshold), dim_expr(work));
}

int64_t hint_numel(const graph::Dims& sizes, const sym::ShapeEnv& symbols) {
  int64_t n = 1;
  for (const graph::DimExpr& d : sizes) n *= hint_of(d, symbols);
  return n;
}

}  // namespace ember::sched
