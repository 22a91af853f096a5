#include "codegen/triton/triton_kernel_shape.h"

#include <algorithm>
#include <cstdlib>

namespace ember::codegen::triton_shape {

using namespace loop;

bool uses_any(const Expr& e, const std::set<std::string>& vars, bool any) {
  if (!e.defined() || (vars.empty() && !any)) return false;
  switch (e.kind()) {
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::SizeVar:
      return false;
    case ExprKind::Var:
      return any || vars.count(e.as<Var>()->name) != 0;
    case ExprKind::Not:
      return uses_any(e.as<Not>()->a, vars, any);
    case ExprKind::Select: {
      const auto* s = e.as<Select>();
      return uses_any(s->cond, vars, any) || uses_any(s->t, vars, any) || uses_any(s->f, vars, any);
    }
    case ExprKind::Cast:
      return uses_any(e.as<Cast>()->value, vars, any);
    case ExprKind::Load:
      return uses_any(e.as<Load>()->index, vars, any);
    case ExprKind::Call:
      for (const Expr& a : e.as<Call>()->args) {
        if (uses_any(a, vars, any)) return true;
      }
      return false;
    default:
      break;
  }
#define EMBER_LOOP_BINARY(Name, Symbol, Cat)                       \
  if (e.kind() == ExprKind::Name) {                                \
    const auto* b = e.as<BinaryNode<ExprKind::Name>>();            \
    return uses_any(b->a, vars, any) || uses_any(b->b, vars, any); \
  }
#include "loop/nodes.def"
  return false;
}

bool has_loop(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::For:
      return true;
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) {
        if (has_loop(c)) return true;
      }
      return false;
    case StmtKind::Let:
      return has_loop(s.as<Let>()->body);
    case StmtKind::Allocate:
      return has_loop(s.as<Allocate>()->body);
    case StmtKind::IfThenElse: {
      const auto* i = s.as<IfThenElse>();
      return has_loop(i->then_case) || (i->else_case.defined() && has_loop(i->else_case));
    }
    default:
      return false;
  }
}

bool straight(const Stmt& s, bool accumulates) {
  switch (s.kind()) {
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) {
        if (!straight(c, accumulates)) return false;
      }
      return true;
    case StmtKind::Let:
      return straight(s.as<Let>()->body, accumulates);
    case StmtKind::Store:
      return true;
    case StmtKind::Accumulate:
      return accumulates;
    default:
      return false;
  }
}

bool int32_indices(const Kernel& k) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (!k.size_vars.empty()) return false;
  for (const BufferParam& b : k.buffers) {
    int64_t last = 0;
    for (size_t d = 0; d < b.sizes.size() && d < b.strides.size(); ++d) {
      const auto* n = b.sizes[d].as<IntImm>();
      const auto* st = b.strides[d].as<IntImm>();
      if (n == nullptr || st == nullptr || n->value > kLimit || std::abs(st->value) > kLimit) {
        return false;
      }
      if (n->value > 0) last += (n->value - 1) * std::abs(st->value);
      if (last >= kLimit) return false;
    }
  }
  return true;
}

/// The longest loop of `s` when every loop in it is a block loop (no loop inside another) of
/// constant extent; -1 otherwise.
static int64_t longest_flat_loop(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::For: {
      const auto* f = s.as<For>();
      const auto* n = f->extent.as<IntImm>();
      if (n == nullptr || has_loop(f->body)) return -1;
      return n->value;
    }
    case StmtKind::Block: {
      int64_t m = 0;
      for (const Stmt& c : s.as<Block>()->stmts) {
        int64_t e = longest_flat_loop(c);
        if (e < 0) return -1;
        m = std::max(m, e);
      }
      return m;
    }
    case StmtKind::Let:
      return longest_flat_loop(s.as<Let>()->body);
    case StmtKind::Allocate:
      return longest_flat_loop(s.as<Allocate>()->body);
    case StmtKind::IfThenElse:
      return has_loop(s) ? -1 : 0;
    default:
      return 0;
  }
}

bool persistent_form(const Stmt& rest) {
  const char* env = std::getenv("EMBER_TRITON_PERSISTENT");
  if (env != nullptr && std::string(env) == "0") return false;
  int64_t e = longest_flat_loop(rest);
  return e > 0 && e <= kMaxPersistent;
}

}  // namespace ember::codegen::triton_shape
