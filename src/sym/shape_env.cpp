#include "sym/shape_env.h"

#include "support/error.h"

namespace ember::sym {

SymExpr ShapeEnv::create_symbol(int64_t hint, std::string source, Range range) {
  EMBER_CHECK(range.contains(hint))
      << "the hint " << hint << " of " << source << " is outside its range " << range.str();
  SymbolInfo s;
  s.id = static_cast<SymbolId>(symbols_.size());
  s.name = "s" + std::to_string(s.id);
  s.range = range;
  s.hint = hint;
  s.source = std::move(source);
  symbols_.push_back(std::move(s));
  return symbol(symbols_.back().id);
}

SymExpr ShapeEnv::create_size(int64_t hint, std::string source) {
  EMBER_CHECK(hint >= 0) << "the size " << source << " is negative: " << hint;
  if (!specialize_zero_one_) return create_symbol(hint, std::move(source), Range::at_least(0));
  if (hint <= 1) return hint;
  return create_symbol(hint, std::move(source), Range::at_least(2));
}

void ShapeEnv::constrain(SymbolId id, Range range) {
  SymbolInfo& s = symbols_.at(info(id).id);
  Range r{std::max(s.range.lo, range.lo), std::min(s.range.hi, range.hi)};
  EMBER_CHECK(r.lo <= r.hi && r.contains(s.hint))
      << "constraining " << s.name << " (" << s.source << ", hint " << s.hint << ") from "
      << s.range.str() << " to " << range.str()
      << (r.lo <= r.hi ? " excludes the hint" : " leaves no value");
  s.range = r;
}

const SymbolInfo& ShapeEnv::info(SymbolId id) const {
  EMBER_CHECK(id >= 0 && static_cast<size_t>(id) < symbols_.size()) << "unknown symbol id " << id;
  return symbols_[id];
}

const SymbolInfo* ShapeEnv::find(std::string_view name) const {
  for (const SymbolInfo& s : symbols_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Bindings ShapeEnv::hints() const {
  Bindings b;
  for (const SymbolInfo& s : symbols_) b[s.id] = s.hint;
  return b;
}

}  // namespace ember::sym
