/// \file
/// The symbols of one compilation: for each, its name, its range (what values it may take), its
/// hint (the value seen while tracing) and its source (where the value comes from). Expressions
/// (expr.h) name symbols by id; the ShapeEnv gives the ids meaning.
///
/// 0/1 specialization (Inductor's `specialize_zero_one`): a size seen as 0 or 1 is made the
/// constant it was (the caller guards on it), and every dynamic size symbol is then >= 2, which
/// keeps broadcasting and contiguity questions decidable without new guards.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sym/expr.h"
#include "sym/range.h"

namespace ember::sym {

/// Values of symbols, by id.
using Bindings = std::map<SymbolId, int64_t>;

struct SymbolInfo {
  SymbolId id = -1;
  std::string name;    ///< `s<id>`
  Range range;         ///< every value the symbol may take
  int64_t hint = 0;    ///< the value seen while tracing; inside `range`
  std::string source;  ///< where it comes from, e.g. "L['x'].size()[0]"
};

class ShapeEnv {
 public:
  /// With `specialize_zero_one`, create_size() returns 0 and 1 as constants.
  ShapeEnv() : ShapeEnv(true) {}
  explicit ShapeEnv(bool specialize_zero_one) : specialize_zero_one_(specialize_zero_one) {}

  /// A new symbol `s<N>` (N = the number of symbols so far). Throws UserError when `hint` is
  /// outside `range`.
  SymExpr create_symbol(int64_t hint, std::string source, Range range = Range::at_least(0));
  /// The size of an input dimension seen as `hint` (>= 0, else UserError). With 0/1
  /// specialization: 0 and 1 are returned as constants, and other hints get a symbol in
  /// [2, inf); without it, a symbol in [0, inf).
  SymExpr create_size(int64_t hint, std::string source);

  /// Narrows a symbol's range to its intersection with `range`. Throws UserError when the result
  /// is empty or no longer holds the hint.
  void constrain(SymbolId id, Range range);

  /// Throws UserError for an id this ShapeEnv does not hold.
  const SymbolInfo& info(SymbolId id) const;
  Range range(SymbolId id) const { return info(id).range; }
  /// The symbol called `name`, or nullptr.
  const SymbolInfo* find(std::string_view name) const;
  /// The symbol with that id as an expression.
  SymExpr symbol(SymbolId id) const { return SymExpr::symbol(id, info(id).name); }
  /// Every symbol, by id.
  const std::vector<SymbolInfo>& symbols() const { return symbols_; }
  /// Every symbol's hint.
  Bindings hints() const;

  bool specialize_zero_one() const { return specialize_zero_one_; }

 private:
  bool specialize_zero_one_;
  std::vector<SymbolInfo> symbols_;
};

}  // namespace ember::sym
