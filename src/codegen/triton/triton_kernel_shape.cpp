#include "codegen/triton/triton_kernel_shape.h"

#include <algorithm>
#include <cstdlib>

#include "loop/traverse.h"

namespace ember::codegen::triton_shape {

using namespace loop;

bool uses_any(const Expr& e, const std::set<std::string>& vars, bool any) {
  if (!e.defined() || (vars.empty() && !any)) return false;
  if (const auto* v = e.as<Var>()) return any || vars.count(v->name) != 0;
  bool found = false;
  for_each_child(e, [&](const Expr& c) { found = found || uses_any(c, vars, any); });
  return found;
}

bool has_loop(const Stmt& s) {
  if (s.kind() == StmtKind::For) return true;
  bool found = false;
  for_each_stmt_child(
      s, [](const Expr&) {}, [&](const Stmt& c) { found = found || (c.defined() && has_loop(c)); });
  return found;
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
