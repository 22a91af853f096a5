/// \file
/// Size guards: the relations between sizes that a trace relied on. A trace that branched on
/// `s0 > 1`, broadcast `s0` against `s1`, or turned a size into a Python int recorded the answer
/// it saw (at the symbols' hints); the compiled code is valid only for bindings under which every
/// guard gives the same answer again. Relations decided from the ranges alone (query.h) record
/// nothing.
#pragma once

#include <string>
#include <vector>

#include "sym/expr.h"
#include "sym/query.h"
#include "sym/shape_env.h"

namespace ember::sym {

struct SizeGuard {
  SymExpr lhs;
  Rel rel = Rel::EQ;
  SymExpr rhs;
  bool expected = true;  ///< the answer seen while tracing
  bool operator==(const SizeGuard&) const = default;
};

/// `a rel b` on numbers.
bool relation_holds(int64_t a, Rel rel, int64_t b);

/// Whether `g` gives its expected answer under `bindings` (every symbol of it bound).
bool guard_holds(const SizeGuard& g, const Bindings& bindings);

/// "s0*2 == s1", or "not (s0 == 1)" for an expected false.
std::string print(const SizeGuard& g);

/// Decides relations between sizes, recording a guard for each answer that the ranges alone do
/// not give. Holds the ShapeEnv (not owned) and the guards recorded so far.
///
/// A guard that pins a symbol to a constant (`s2 == 32` answered true, as a LayerNorm's width
/// against its weight) also narrows the symbol's range to that value, so from then on
/// simplify() reads the symbol as the constant (Dynamo's replacements, for constants): `s2 // 4`
/// is 8 and `(C // H) ** 0.5` a plain float.
class GuardRecorder {
 public:
  explicit GuardRecorder(ShapeEnv& env) : env_(&env) {}

  /// `a rel b`: statically known (true or false) answers record nothing; otherwise the answer at
  /// the hints, recorded as a guard.
  bool decide(const SymExpr& a, Rel rel, const SymExpr& b);
  /// `e` as an integer: a constant (after simplify()) as it is; otherwise its hint, recording
  /// `e == hint` (the value is specialized).
  int64_t specialize(const SymExpr& e);

  const std::vector<SizeGuard>& guards() const { return guards_; }
  const ShapeEnv& env() const { return *env_; }

 private:
  ShapeEnv* env_;
  std::vector<SizeGuard> guards_;
};

}  // namespace ember::sym
