#include "sym/guard.h"

#include <algorithm>

#include "sym/eval.h"
#include "sym/printer.h"
#include "sym/simplify.h"

namespace ember::sym {

bool relation_holds(int64_t a, Rel rel, int64_t b) {
  switch (rel) {
    case Rel::EQ:
      return a == b;
    case Rel::NE:
      return a != b;
    case Rel::LT:
      return a < b;
    case Rel::LE:
      return a <= b;
    case Rel::GT:
      return a > b;
    case Rel::GE:
      return a >= b;
  }
  return false;
}

namespace {

Rel negate(Rel rel) {
  switch (rel) {
    case Rel::EQ:
      return Rel::NE;
    case Rel::NE:
      return Rel::EQ;
    case Rel::LT:
      return Rel::GE;
    case Rel::LE:
      return Rel::GT;
    case Rel::GT:
      return Rel::LE;
    case Rel::GE:
      return Rel::LT;
  }
  return Rel::EQ;
}

}  // namespace

bool guard_holds(const SizeGuard& g, const Bindings& bindings) {
  return relation_holds(evaluate(g.lhs, bindings), g.rel, evaluate(g.rhs, bindings)) == g.expected;
}

std::string print(const SizeGuard& g) {
  std::string rel = print(g.lhs) + " " + rel_name(g.rel) + " " + print(g.rhs);
  return g.expected ? rel : "not (" + rel + ")";
}

bool GuardRecorder::decide(const SymExpr& a, Rel rel, const SymExpr& b) {
  if (statically_known_true(a, rel, b, *env_)) return true;
  if (statically_known_true(a, negate(rel), b, *env_)) return false;
  bool answer = relation_holds(hint(a, *env_), rel, hint(b, *env_));
  SizeGuard g{a, rel, b, answer};
  if (std::find(guards_.begin(), guards_.end(), g) == guards_.end()) guards_.push_back(g);
  if ((rel == Rel::EQ && answer) || (rel == Rel::NE && !answer)) {
    // a == b holds at every binding the guard admits: a symbol equal to a constant is pinned.
    auto pin = [&](const SymExpr& s, const SymExpr& c) {
      std::optional<SymbolId> id = s.as_symbol();
      std::optional<int64_t> v = c.as_constant();
      if (id && v) env_->constrain(*id, Range::constant(*v));
    };
    pin(a, b);
    pin(b, a);
  }
  return answer;
}

int64_t GuardRecorder::specialize(const SymExpr& e) {
  if (std::optional<int64_t> c = simplify(e, *env_).as_constant()) return *c;
  int64_t v = hint(e, *env_);
  decide(e, Rel::EQ, SymExpr(v));
  return v;
}

}  // namespace ember::sym
