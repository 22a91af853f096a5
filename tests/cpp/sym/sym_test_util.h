// A ShapeEnv with three symbols, for the tests of src/sym.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "support/error.h"
#include "sym/expr.h"
#include "sym/printer.h"
#include "sym/range.h"
#include "sym/shape_env.h"

namespace ember::sym {

class SymTest : public ::testing::Test {
 protected:
  ShapeEnv env;
  SymExpr s0 = env.create_symbol(5, "L['x'].size()[0]");
  SymExpr s1 = env.create_symbol(7, "L['x'].size()[1]");
  SymExpr s2 = env.create_symbol(3, "L['y'].size()[0]");
};

/// How gtest shows a Range.
inline void PrintTo(const Range& r, std::ostream* os) {
  *os << r.str();
}

/// The message of the exception of type E that `f` throws ("" when it throws none).
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace ember::sym
