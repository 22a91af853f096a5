#include "tracer/sym_node.h"

#include <algorithm>
#include <functional>

#include "support/error.h"
#include "sym/eval.h"
#include "sym/printer.h"
#include "sym/simplify.h"

namespace ember::tracer {
namespace {

using sym::Rel;
using sym::SymExpr;

SizeNode* as_size_node(const c10::SymNode& n) {
  auto* s = dynamic_cast<SizeNode*>(n.get());
  EMBER_UNSUPPORTED(s != nullptr) << "a symbolic size of another tracer (" << n->str()
                                  << ") met one of ember's";
  return s;
}

std::shared_ptr<const SizeBool> const_bool(bool v) {
  auto b = std::make_shared<SizeBool>();
  b->kind = SizeBool::Kind::Const;
  b->value = v;
  return b;
}

/// The sizes or strides of a contiguity question, as expressions.
std::vector<SymExpr> exprs(c10::ArrayRef<c10::SymNode> nodes) {
  std::vector<SymExpr> out;
  for (const c10::SymNode& n : nodes) out.push_back(as_size_node(n)->expr());
  return out;
}

/// Strides `strides` are the dense strides of `sizes` in dimension order `order` (outermost
/// first), as expressions (size-1 dims, whose stride does not matter, skipped).
bool dense_in_order(const std::vector<SymExpr>& sizes, const std::vector<SymExpr>& strides,
                    const std::vector<size_t>& order) {
  SymExpr acc(1);
  for (size_t k = order.size(); k-- > 0;) {
    size_t d = order[k];
    if (sizes[d] == SymExpr(1)) continue;
    if (!(strides[d] == acc)) return false;
    acc = acc * sizes[d];
  }
  return true;
}

std::vector<size_t> identity_order(size_t n) {
  std::vector<size_t> o(n);
  for (size_t i = 0; i < n; ++i) o[i] = i;
  return o;
}

/// Channels-last order for rank 4 (N, H, W, C) or 5 (N, D, H, W, C).
std::vector<size_t> channels_last_order(size_t n) {
  if (n == 4) return {0, 2, 3, 1};
  return {0, 2, 3, 4, 1};
}

}  // namespace

SizeNode::SizeNode(sym::GuardRecorder* guards, SymExpr expr)
    : guards_(guards), is_bool_(false), expr_(std::move(expr)) {}

SizeNode::SizeNode(sym::GuardRecorder* guards, std::shared_ptr<const SizeBool> b)
    : guards_(guards), is_bool_(true), cond_(std::move(b)) {}

int64_t SizeNode::hint() const {
  return sym::hint(expr_, guards_->env());
}

c10::SymNode SizeNode::make(SymExpr e) const {
  // Simplified, so that a symbol a guard pinned reads as its constant (GuardRecorder).
  return c10::make_intrusive<SizeNode>(guards_, sym::simplify(e, guards_->env()));
}
c10::SymNode SizeNode::make_bool(std::shared_ptr<const SizeBool> b) const {
  return c10::make_intrusive<SizeNode>(guards_, std::move(b));
}

c10::SymNode SizeNode::add(const c10::SymNode& o) {
  return make(expr_ + as_size_node(o)->expr_);
}
c10::SymNode SizeNode::sub(const c10::SymNode& o) {
  return make(expr_ - as_size_node(o)->expr_);
}
c10::SymNode SizeNode::mul(const c10::SymNode& o) {
  return make(expr_ * as_size_node(o)->expr_);
}
c10::SymNode SizeNode::floordiv(const c10::SymNode& o) {
  return make(sym::floordiv(expr_, as_size_node(o)->expr_));
}
c10::SymNode SizeNode::int_floordiv(const c10::SymNode& o) {
  return floordiv(o);
}
c10::SymNode SizeNode::mod(const c10::SymNode& o) {
  return make(sym::mod(expr_, as_size_node(o)->expr_));
}
c10::SymNode SizeNode::neg() {
  return make(-expr_);
}
c10::SymNode SizeNode::sym_min(const c10::SymNode& o) {
  return make(sym::min(expr_, as_size_node(o)->expr_));
}
c10::SymNode SizeNode::sym_max(const c10::SymNode& o) {
  return make(sym::max(expr_, as_size_node(o)->expr_));
}

c10::SymNode SizeNode::relation(const c10::SymNode& other, Rel rel) {
  auto b = std::make_shared<SizeBool>();
  b->kind = SizeBool::Kind::Rel;
  b->lhs = expr_;
  b->rhs = as_size_node(other)->expr_;
  b->rel = rel;
  return make_bool(std::move(b));
}
c10::SymNode SizeNode::eq(const c10::SymNode& o) {
  return relation(o, Rel::EQ);
}
c10::SymNode SizeNode::ne(const c10::SymNode& o) {
  return relation(o, Rel::NE);
}
c10::SymNode SizeNode::lt(const c10::SymNode& o) {
  return relation(o, Rel::LT);
}
c10::SymNode SizeNode::le(const c10::SymNode& o) {
  return relation(o, Rel::LE);
}
c10::SymNode SizeNode::gt(const c10::SymNode& o) {
  return relation(o, Rel::GT);
}
c10::SymNode SizeNode::ge(const c10::SymNode& o) {
  return relation(o, Rel::GE);
}

c10::SymNode SizeNode::sym_and(const c10::SymNode& o) {
  auto b = std::make_shared<SizeBool>();
  b->kind = SizeBool::Kind::And;
  b->a = cond_;
  b->b = as_size_node(o)->cond_;
  return make_bool(std::move(b));
}
c10::SymNode SizeNode::sym_or(const c10::SymNode& o) {
  auto b = std::make_shared<SizeBool>();
  b->kind = SizeBool::Kind::Or;
  b->a = cond_;
  b->b = as_size_node(o)->cond_;
  return make_bool(std::move(b));
}
c10::SymNode SizeNode::sym_not() {
  auto b = std::make_shared<SizeBool>();
  b->kind = SizeBool::Kind::Not;
  b->a = cond_;
  return make_bool(std::move(b));
}

// Layout questions are answered structurally: true when the strides are the dense strides of
// the sizes in that order as expressions (so for every binding), else false. A false answer for
// a layout that holds only at some sizes is conservative: torch then treats the tensor as not
// having that layout, which costs a copy at worst, never a wrong result.
c10::SymNode SizeNode::is_contiguous(c10::ArrayRef<c10::SymNode> sizes,
                                     c10::ArrayRef<c10::SymNode> strides) {
  std::vector<SymExpr> sz = exprs(sizes), st = exprs(strides);
  return make_bool(const_bool(dense_in_order(sz, st, identity_order(sz.size()))));
}
c10::SymNode SizeNode::is_channels_last_contiguous_2d(c10::ArrayRef<c10::SymNode> sizes,
                                                      c10::ArrayRef<c10::SymNode> strides) {
  std::vector<SymExpr> sz = exprs(sizes), st = exprs(strides);
  return make_bool(const_bool(sz.size() == 4 && dense_in_order(sz, st, channels_last_order(4))));
}
c10::SymNode SizeNode::is_channels_last_contiguous_3d(c10::ArrayRef<c10::SymNode> sizes,
                                                      c10::ArrayRef<c10::SymNode> strides) {
  std::vector<SymExpr> sz = exprs(sizes), st = exprs(strides);
  return make_bool(const_bool(sz.size() == 5 && dense_in_order(sz, st, channels_last_order(5))));
}
c10::SymNode SizeNode::is_channels_last_strides_2d(c10::ArrayRef<c10::SymNode> sizes,
                                                   c10::ArrayRef<c10::SymNode> strides) {
  return is_channels_last_contiguous_2d(sizes, strides);
}
c10::SymNode SizeNode::is_channels_last_strides_3d(c10::ArrayRef<c10::SymNode> sizes,
                                                   c10::ArrayRef<c10::SymNode> strides) {
  return is_channels_last_contiguous_3d(sizes, strides);
}
c10::SymNode SizeNode::is_non_overlapping_and_dense(c10::ArrayRef<c10::SymNode> sizes,
                                                    c10::ArrayRef<c10::SymNode> strides) {
  std::vector<SymExpr> sz = exprs(sizes), st = exprs(strides);
  // The order of the strides at the hints, then dense in that order as expressions.
  std::vector<int64_t> hints;
  for (const SymExpr& s : st) hints.push_back(sym::hint(s, guards_->env()));
  std::vector<size_t> order = identity_order(sz.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return hints[a] > hints[b]; });
  return make_bool(const_bool(dense_in_order(sz, st, order)));
}

c10::SymNode SizeNode::clone() {
  return is_bool_ ? make_bool(cond_) : make(expr_);
}
c10::SymNode SizeNode::sym_float() {
  EMBER_UNSUPPORTED(false) << "the symbolic size " << str()
                           << " used as a float (a size as a Python scalar with a tensor, as in "
                           << "`t * x.shape[0]`, or `x.shape[-1] ** 0.5`): symbolic floats are "
                           << "not built yet";
  return {};
}
c10::SymNode SizeNode::truediv(const c10::SymNode&) {
  return sym_float();
}
c10::SymNode SizeNode::pow(const c10::SymNode&) {
  return sym_float();
}

c10::SymNode SizeNode::wrap_int(int64_t num) {
  return make(SymExpr(num));
}
c10::SymNode SizeNode::wrap_bool(bool num) {
  return make_bool(const_bool(num));
}

std::optional<bool> SizeNode::decide(const SizeBool& b, bool record) {
  switch (b.kind) {
    case SizeBool::Kind::Const:
      return b.value;
    case SizeBool::Kind::Rel:
      if (sym::statically_known_true(b.lhs, b.rel, b.rhs, guards_->env())) return true;
      if (!record) return std::nullopt;
      return guards_->decide(b.lhs, b.rel, b.rhs);
    case SizeBool::Kind::Not: {
      std::optional<bool> a = decide(*b.a, record);
      if (!a) return std::nullopt;
      return !*a;
    }
    case SizeBool::Kind::And:
    case SizeBool::Kind::Or: {
      bool is_and = b.kind == SizeBool::Kind::And;
      std::optional<bool> a = decide(*b.a, record);
      if (a && *a != is_and) return *a;  // short circuit
      std::optional<bool> c = decide(*b.b, record);
      if (c && *c != is_and) return *c;
      if (a && c) return is_and;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

int64_t SizeNode::guard_int(const char*, int64_t) {
  EMBER_INTERNAL_ASSERT(!is_bool_) << "guard_int of a symbolic bool";
  return guards_->specialize(expr_);
}
bool SizeNode::guard_bool(const char*, int64_t) {
  EMBER_INTERNAL_ASSERT(is_bool_) << "guard_bool of a symbolic int";
  std::optional<bool> v = decide(*cond_, /*record=*/true);
  EMBER_INTERNAL_ASSERT(v.has_value()) << "an undecided size relation " << str();
  return *v;
}
bool SizeNode::guard_size_oblivious(const char* f, int64_t l) {
  return guard_bool(f, l);
}
bool SizeNode::guard_or_false(const char* f, int64_t l) {
  return guard_bool(f, l);
}
bool SizeNode::guard_or_true(const char* f, int64_t l) {
  return guard_bool(f, l);
}
bool SizeNode::expect_true(const char* f, int64_t l) {
  return guard_bool(f, l);
}
bool SizeNode::statically_known_true(const char*, int64_t) {
  if (!is_bool_) return false;
  std::optional<bool> v = decide(*cond_, /*record=*/false);
  return v.has_value() && *v;
}
int64_t SizeNode::int_() {
  return guard_int(__FILE__, __LINE__);
}
bool SizeNode::bool_() {
  return guard_bool(__FILE__, __LINE__);
}

std::string SizeNode::str() {
  if (!is_bool_) return sym::print(expr_);
  std::function<std::string(const SizeBool&)> p = [&](const SizeBool& b) -> std::string {
    switch (b.kind) {
      case SizeBool::Kind::Const:
        return b.value ? "True" : "False";
      case SizeBool::Kind::Rel:
        return sym::print(b.lhs) + " " + sym::rel_name(b.rel) + " " + sym::print(b.rhs);
      case SizeBool::Kind::Not:
        return "not (" + p(*b.a) + ")";
      case SizeBool::Kind::And:
        return "(" + p(*b.a) + ") and (" + p(*b.b) + ")";
      case SizeBool::Kind::Or:
        return "(" + p(*b.a) + ") or (" + p(*b.b) + ")";
    }
    return "?";
  };
  return p(*cond_);
}

std::optional<int64_t> SizeNode::constant_int() {
  if (is_bool_) return std::nullopt;
  // A symbol pinned after this node was made is a constant now.
  return sym::simplify(expr_, guards_->env()).as_constant();
}
std::optional<bool> SizeNode::constant_bool() {
  if (!is_bool_ || cond_->kind != SizeBool::Kind::Const) return std::nullopt;
  return cond_->value;
}
std::optional<int64_t> SizeNode::maybe_as_int() {
  return constant_int();
}
bool SizeNode::is_constant() {
  return is_bool_ ? cond_->kind == SizeBool::Kind::Const : constant_int().has_value();
}

c10::SymInt to_symint(const graph::DimExpr& d, sym::GuardRecorder* guards) {
  if (d.is_constant()) return c10::SymInt(d.constant());
  return c10::SymInt(c10::SymNode(c10::make_intrusive<SizeNode>(guards, d.expr())));
}

graph::DimExpr to_dim(const c10::SymInt& s) {
  if (std::optional<int64_t> c = s.maybe_as_int()) return *c;
  c10::SymNode n = s.toSymNode();
  return graph::DimExpr(as_size_node(n)->expr());
}

}  // namespace ember::tracer
