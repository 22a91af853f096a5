#include "codegen/triton/triton_kernel_shape.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "loop/eval.h"
#include "loop/simplify.h"
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

namespace {

void collect(const Stmt& s, std::vector<Expr>* loads, std::vector<Expr>* stores);

void collect_expr(const Expr& e, std::vector<Expr>* loads) {
  if (!e.defined()) return;
  if (const auto* l = e.as<Load>()) loads->push_back(l->index);
  for_each_child(e, [&](const Expr& c) { collect_expr(c, loads); });
}

void collect(const Stmt& s, std::vector<Expr>* loads, std::vector<Expr>* stores) {
  if (!s.defined()) return;
  if (const auto* st = s.as<Store>()) stores->push_back(st->index);
  for_each_stmt_child(
      s, [&](const Expr& e) { collect_expr(e, loads); },
      [&](const Stmt& c) { collect(c, loads, stores); });
}

}  // namespace

std::optional<size_t> transposed_read_loop(const std::vector<std::string>& vars, const Stmt& body) {
  if (vars.size() < 2) return std::nullopt;
  std::vector<Expr> loads, stores;
  collect(body, &loads, &stores);
  const size_t a = vars.size() - 1;
  // Stores are written along the innermost loop, or along one other loop (a kernel storing a
  // value in two layouts: a residual sum kept channels-last and its contiguous copy for the next
  // group norm): that loop is then the tile's other axis, so every store is coalesced.
  std::optional<size_t> store_loop;
  for (const Expr& st : stores) {
    std::optional<std::vector<int64_t>> c = affine_coefficients(st, vars);
    if (!c) return std::nullopt;
    if ((*c)[a] == 1) continue;
    std::optional<size_t> along;
    for (size_t b = 0; b < a && !along; ++b) {
      if ((*c)[b] == 1) along = b;
    }
    if (!along || (store_loop && *store_loop != *along)) return std::nullopt;
    store_loop = along;
  }
  if (store_loop) return store_loop;
  std::vector<int> votes(vars.size(), 0);
  for (const Expr& ld : loads) {
    std::optional<std::vector<int64_t>> c = affine_coefficients(ld, vars);
    if (!c) return std::nullopt;
    if ((*c)[a] == 1 || (*c)[a] == 0) continue;  // contiguous along the innermost, or broadcast
    for (size_t b = 0; b < a; ++b) {
      if ((*c)[b] == 1) votes[b]++;
    }
  }
  size_t best = a;
  for (size_t b = 0; b < a; ++b) {
    if (votes[b] > 0 && (best == a || votes[b] > votes[best])) best = b;
  }
  if (best == a) return std::nullopt;
  return best;
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
  int64_t e = longest_flat_loop(rest);
  return e > 0 && e <= kMaxPersistent;
}

int64_t persistent_extent(const Stmt& rest) {
  return persistent_form(rest) ? longest_flat_loop(rest) : -1;
}

int rows_per_program(int64_t rows, int64_t extent) {
  if (extent <= 0 || extent > 512 || rows <= 0) return 1;
  int64_t block = 16;
  while (block < extent) block *= 2;  // the launcher's RBLOCK (triton_block_size)
  int64_t r = std::min<int64_t>(32, kRowTileLanes / block);
  while (r > 1 && rows / r < kMinRowTilePrograms) r /= 2;
  return static_cast<int>(std::max<int64_t>(r, 1));
}

}  // namespace ember::codegen::triton_shape
