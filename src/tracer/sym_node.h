/// \file
/// ember's symbolic integers inside torch: a c10::SymNodeImpl over a sym::SymExpr, so a tracer
/// tensor can report symbolic sizes (`sym_sizes()`), Python code sees `torch.SymInt`s for them,
/// and arithmetic and comparisons on them build ember expressions. Whenever torch or the program
/// needs a concrete answer (`bool(s0 > 1)`, `int(s0)`, a contiguity check), the answer comes from
/// the symbols' hints and is recorded as a size guard (sym/guard.h) by the trace's recorder.
#pragma once

#include <c10/core/SymInt.h>
#include <c10/core/SymNodeImpl.h>

#include <memory>

#include "graph/types.h"
#include "sym/guard.h"

namespace ember::tracer {

/// A boolean over size relations: a constant, `lhs rel rhs`, or not/and/or of others.
struct SizeBool {
  enum class Kind : uint8_t { Const, Rel, Not, And, Or };
  Kind kind = Kind::Const;
  bool value = false;  ///< Const
  sym::SymExpr lhs, rhs;
  sym::Rel rel = sym::Rel::EQ;
  std::shared_ptr<const SizeBool> a, b;  ///< Not: a; And, Or: a and b
};

class SizeNode final : public c10::SymNodeImpl {
 public:
  /// An int node: `expr`, decided through `guards` (which outlives the node's use in the trace).
  SizeNode(sym::GuardRecorder* guards, sym::SymExpr expr);
  /// A bool node.
  SizeNode(sym::GuardRecorder* guards, std::shared_ptr<const SizeBool> b);

  const sym::SymExpr& expr() const { return expr_; }
  /// The value at the symbols' hints (an int node).
  int64_t hint() const;

  bool is_int() override { return !is_bool_; }
  bool is_bool() override { return is_bool_; }
  bool is_float() override { return false; }
  c10::SymNode add(const c10::SymNode& other) override;
  c10::SymNode sub(const c10::SymNode& other) override;
  c10::SymNode mul(const c10::SymNode& other) override;
  c10::SymNode floordiv(const c10::SymNode& other) override;
  c10::SymNode int_floordiv(const c10::SymNode& other) override;
  c10::SymNode mod(const c10::SymNode& other) override;
  c10::SymNode neg() override;
  c10::SymNode sym_min(const c10::SymNode& other) override;
  c10::SymNode sym_max(const c10::SymNode& other) override;
  c10::SymNode eq(const c10::SymNode& other) override;
  c10::SymNode ne(const c10::SymNode& other) override;
  c10::SymNode lt(const c10::SymNode& other) override;
  c10::SymNode le(const c10::SymNode& other) override;
  c10::SymNode gt(const c10::SymNode& other) override;
  c10::SymNode ge(const c10::SymNode& other) override;
  c10::SymNode sym_and(const c10::SymNode& other) override;
  c10::SymNode sym_or(const c10::SymNode& other) override;
  c10::SymNode sym_not() override;
  c10::SymNode is_contiguous(c10::ArrayRef<c10::SymNode> sizes,
                             c10::ArrayRef<c10::SymNode> strides) override;
  c10::SymNode is_channels_last_contiguous_2d(c10::ArrayRef<c10::SymNode> sizes,
                                              c10::ArrayRef<c10::SymNode> strides) override;
  c10::SymNode is_channels_last_contiguous_3d(c10::ArrayRef<c10::SymNode> sizes,
                                              c10::ArrayRef<c10::SymNode> strides) override;
  c10::SymNode is_channels_last_strides_2d(c10::ArrayRef<c10::SymNode> sizes,
                                           c10::ArrayRef<c10::SymNode> strides) override;
  c10::SymNode is_channels_last_strides_3d(c10::ArrayRef<c10::SymNode> sizes,
                                           c10::ArrayRef<c10::SymNode> strides) override;
  c10::SymNode is_non_overlapping_and_dense(c10::ArrayRef<c10::SymNode> sizes,
                                            c10::ArrayRef<c10::SymNode> strides) override;
  c10::SymNode clone() override;
  /// Unsupported, as are truediv and pow: symbolic floats are not built. (A size mixed with a
  /// tensor as a Python scalar, `t * x.shape[0]` or `t / x.shape[-1] ** 0.5`, goes through
  /// torch's sym_float; a float specialized to its hint is not enough there: torch wraps a
  /// SymFloat scalar into a tensor without reading its value.)
  c10::SymNode sym_float() override;
  c10::SymNode truediv(const c10::SymNode& other) override;
  c10::SymNode pow(const c10::SymNode& other) override;
  c10::SymNode wrap_int(int64_t num) override;
  c10::SymNode wrap_bool(bool num) override;
  int64_t guard_int(const char* file, int64_t line) override;
  bool guard_bool(const char* file, int64_t line) override;
  bool guard_size_oblivious(const char* file, int64_t line) override;
  bool guard_or_false(const char* file, int64_t line) override;
  bool guard_or_true(const char* file, int64_t line) override;
  bool statically_known_true(const char* file, int64_t line) override;
  bool expect_true(const char* file, int64_t line) override;
  int64_t int_() override;
  bool bool_() override;
  bool has_hint() override { return true; }
  std::string str() override;
  std::string _graph_repr() override { return str(); }
  std::optional<int64_t> constant_int() override;
  std::optional<bool> constant_bool() override;
  std::optional<int64_t> maybe_as_int() override;
  bool is_constant() override;
  bool is_symbolic() override { return !is_constant(); }

 private:
  c10::SymNode make(sym::SymExpr e) const;
  c10::SymNode make_bool(std::shared_ptr<const SizeBool> b) const;
  c10::SymNode relation(const c10::SymNode& other, sym::Rel rel);
  /// The answer, recording guards for what the ranges do not decide; nullopt from `statically`
  /// when a guard would be needed.
  std::optional<bool> decide(const SizeBool& b, bool record);

  sym::GuardRecorder* guards_;
  bool is_bool_ = false;
  sym::SymExpr expr_;
  std::shared_ptr<const SizeBool> cond_;
};

/// `d` as a c10::SymInt: a plain int when constant, else a SizeNode.
c10::SymInt to_symint(const graph::DimExpr& d, sym::GuardRecorder* guards);
/// The expression of a SymInt: its constant, or the expression of ember's SizeNode. Unsupported
/// for a SymInt of another kind (Dynamo's, a nested int).
graph::DimExpr to_dim(const c10::SymInt& s);

}  // namespace ember::tracer
