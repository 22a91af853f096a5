#include "loop/traverse.h"

#include "support/error.h"

namespace ember::loop {

void for_each_child(const Expr& e, const std::function<void(const Expr&)>& f) {
  switch (e.kind()) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
    case ExprKind::SizeVar:
      return;
#define EMBER_LOOP_BINARY(Name, Symbol, Cat) \
  case ExprKind::Name:                       \
    f(e.as<Name>()->a);                      \
    f(e.as<Name>()->b);                      \
    return;
#include "loop/nodes.def"
    case ExprKind::Not:
      f(e.as<Not>()->a);
      return;
    case ExprKind::Select: {
      const auto* n = e.as<Select>();
      f(n->cond);
      f(n->t);
      f(n->f);
      return;
    }
    case ExprKind::Cast:
      f(e.as<Cast>()->value);
      return;
    case ExprKind::Load:
      f(e.as<Load>()->index);
      return;
    case ExprKind::Call:
      for (const Expr& a : e.as<Call>()->args) f(a);
      return;
  }
}

Expr map_children(const Expr& e, const std::function<Expr(const Expr&)>& f) {
  switch (e.kind()) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::Var:
    case ExprKind::SizeVar:
      return e;
#define EMBER_LOOP_BINARY(Name, Symbol, Cat)          \
  case ExprKind::Name: {                              \
    const auto* n = e.as<Name>();                     \
    Expr a = f(n->a), b = f(n->b);                    \
    if (a.same_as(n->a) && b.same_as(n->b)) return e; \
    return Name::make(std::move(a), std::move(b));    \
  }
#include "loop/nodes.def"
    case ExprKind::Not: {
      Expr a = f(e.as<Not>()->a);
      return a.same_as(e.as<Not>()->a) ? e : Not::make(std::move(a));
    }
    case ExprKind::Select: {
      const auto* n = e.as<Select>();
      Expr c = f(n->cond), t = f(n->t), fl = f(n->f);
      if (c.same_as(n->cond) && t.same_as(n->t) && fl.same_as(n->f)) return e;
      return Select::make(std::move(c), std::move(t), std::move(fl));
    }
    case ExprKind::Cast: {
      Expr v = f(e.as<Cast>()->value);
      return v.same_as(e.as<Cast>()->value) ? e : Cast::make(e.dtype(), std::move(v));
    }
    case ExprKind::Load: {
      const auto* n = e.as<Load>();
      Expr i = f(n->index);
      return i.same_as(n->index) ? e : Load::make(e.dtype(), n->buffer, std::move(i));
    }
    case ExprKind::Call: {
      const auto* n = e.as<Call>();
      std::vector<Expr> args;
      bool changed = false;
      for (const Expr& a : n->args) {
        args.push_back(f(a));
        changed |= !args.back().same_as(a);
      }
      return changed ? Call::make(n->fn, std::move(args)) : e;
    }
  }
  return e;
}

namespace {

/// Applies `fe` to each expression of `in`; reports whether any changed.
std::vector<Expr> map_exprs(const std::vector<Expr>& in, const std::function<Expr(const Expr&)>& fe,
                            bool& changed) {
  std::vector<Expr> out;
  out.reserve(in.size());
  for (const Expr& e : in) {
    out.push_back(fe(e));
    changed |= !out.back().same_as(e);
  }
  return out;
}

}  // namespace

Stmt map_stmt_children(const Stmt& s, const std::function<Expr(const Expr&)>& fe,
                       const std::function<Stmt(const Stmt&)>& fs) {
  switch (s.kind()) {
    case StmtKind::For: {
      const auto* n = s.as<For>();
      Expr mn = fe(n->min), ext = fe(n->extent);
      Stmt body = fs(n->body);
      if (mn.same_as(n->min) && ext.same_as(n->extent) && body.same_as(n->body)) return s;
      return n->with(std::move(mn), std::move(ext), std::move(body));
    }
    case StmtKind::Block: {
      const auto* n = s.as<Block>();
      std::vector<Stmt> stmts;
      bool changed = false;
      for (const Stmt& c : n->stmts) {
        stmts.push_back(fs(c));
        changed |= !stmts.back().same_as(c);
      }
      return changed ? Block::make(std::move(stmts)) : s;
    }
    case StmtKind::Store: {
      const auto* n = s.as<Store>();
      Expr i = fe(n->index), v = fe(n->value);
      if (i.same_as(n->index) && v.same_as(n->value)) return s;
      return Store::make(n->buffer, std::move(i), std::move(v));
    }
    case StmtKind::Accumulate: {
      const auto* n = s.as<Accumulate>();
      Expr i = fe(n->index);
      bool changed = !i.same_as(n->index);
      std::vector<Expr> values = map_exprs(n->values, fe, changed);
      return changed ? Accumulate::make(n->op, n->buffers, std::move(i), std::move(values)) : s;
    }
    case StmtKind::Let: {
      const auto* n = s.as<Let>();
      Expr v = fe(n->value);
      Stmt body = fs(n->body);
      if (v.same_as(n->value) && body.same_as(n->body)) return s;
      return Let::make(n->var, std::move(v), std::move(body));
    }
    case StmtKind::IfThenElse: {
      const auto* n = s.as<IfThenElse>();
      Expr c = fe(n->cond);
      Stmt t = fs(n->then_case);
      Stmt e = n->else_case.defined() ? fs(n->else_case) : Stmt();
      if (c.same_as(n->cond) && t.same_as(n->then_case) && e.same_as(n->else_case)) return s;
      return IfThenElse::make(std::move(c), std::move(t), std::move(e));
    }
    case StmtKind::Allocate: {
      const auto* n = s.as<Allocate>();
      bool changed = false;
      std::vector<Expr> sizes = map_exprs(n->sizes, fe, changed);
      Stmt body = fs(n->body);
      changed |= !body.same_as(n->body);
      return changed ? Allocate::make(n->buffer, n->dtype, std::move(sizes), std::move(body)) : s;
    }
  }
  return s;
}

void for_each_stmt_child(const Stmt& s, const std::function<void(const Expr&)>& fe,
                         const std::function<void(const Stmt&)>& fs) {
  map_stmt_children(
      s,
      [&](const Expr& e) {
        fe(e);
        return e;
      },
      [&](const Stmt& c) {
        fs(c);
        return c;
      });
}

void collect_vars(const Expr& e, std::set<std::string>& out) {
  if (const auto* v = e.as<Var>()) out.insert(v->name);
  for_each_child(e, [&](const Expr& c) { collect_vars(c, out); });
}

void collect_vars(const Stmt& s, std::set<std::string>& out) {
  for_each_stmt_child(
      s, [&](const Expr& e) { collect_vars(e, out); },
      [&](const Stmt& c) { collect_vars(c, out); });
}

bool has_loop(const Stmt& s) {
  if (s.kind() == StmtKind::For) return true;
  bool found = false;
  for_each_stmt_child(
      s, [](const Expr&) {}, [&](const Stmt& c) { found = found || (c.defined() && has_loop(c)); });
  return found;
}

namespace {

Expr rename_loads(const Expr& e, const std::map<std::string, std::string>& names) {
  Expr r = map_children(e, [&](const Expr& c) { return rename_loads(c, names); });
  if (const auto* l = r.as<Load>()) {
    auto it = names.find(l->buffer);
    if (it != names.end()) return Load::make(r.dtype(), it->second, l->index);
  }
  return r;
}

}  // namespace

Stmt rename_buffers(const Stmt& s, const std::map<std::string, std::string>& names) {
  Stmt r = map_stmt_children(
      s, [&](const Expr& e) { return rename_loads(e, names); },
      [&](const Stmt& c) { return c.defined() ? rename_buffers(c, names) : c; });
  auto renamed = [&](const std::string& b) {
    auto it = names.find(b);
    return it == names.end() ? b : it->second;
  };
  if (const auto* st = r.as<Store>(); st != nullptr && names.count(st->buffer)) {
    return Store::make(renamed(st->buffer), st->index, st->value);
  }
  if (const auto* a = r.as<Accumulate>()) {
    std::vector<std::string> buffers;
    for (const std::string& b : a->buffers) buffers.push_back(renamed(b));
    if (buffers != a->buffers) return Accumulate::make(a->op, buffers, a->index, a->values);
  }
  return r;
}

void buffer_accesses(const Stmt& s, std::set<std::string>& reads, std::set<std::string>& writes) {
  std::function<void(const Expr&)> expr = [&](const Expr& e) {
    if (const auto* l = e.as<Load>()) reads.insert(l->buffer);
    for_each_child(e, expr);
  };
  if (const auto* st = s.as<Store>()) writes.insert(st->buffer);
  if (const auto* a = s.as<Accumulate>()) writes.insert(a->buffers.begin(), a->buffers.end());
  for_each_stmt_child(s, expr, [&](const Stmt& c) {
    if (c.defined()) buffer_accesses(c, reads, writes);
  });
}

Expr substitute(const Expr& e, const std::map<std::string, Expr>& replacements) {
  const std::string* name = nullptr;
  if (const auto* v = e.as<Var>()) name = &v->name;
  if (const auto* v = e.as<SizeVar>()) name = &v->name;
  if (name != nullptr) {
    auto it = replacements.find(*name);
    if (it == replacements.end()) return e;
    EMBER_INTERNAL_ASSERT(it->second.dtype() == e.dtype())
        << "substituting " << *name << " with a value of another type";
    return it->second;
  }
  return map_children(e, [&](const Expr& c) { return substitute(c, replacements); });
}

Stmt substitute(const Stmt& s, const std::map<std::string, Expr>& replacements) {
  return map_stmt_children(
      s, [&](const Expr& e) { return substitute(e, replacements); },
      [&](const Stmt& c) { return substitute(c, replacements); });
}

}  // namespace ember::loop
