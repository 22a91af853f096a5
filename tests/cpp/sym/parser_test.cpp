#include "sym/parser.h"

#include <gtest/gtest.h>

#include "sym_test_util.h"

namespace ember::sym {
namespace {

using SymParser = SymTest;

TEST_F(SymParser, PrintedFormsRoundTrip) {
  for (const char* text : {
           "0", "-3", "s0", "-s0", "s0*2 + (s1 // 8)", "s0 - s1*3 + 4", "-s0*s1*2 + s2 - 1",
           "s0*s0*s1", "((s0 + 1) // s1)", "(s0 // (s1*2))", "s1*((s0*3 + 1) % 4)",
           "min(s0, s1) - max(2, s0)*5", "((s0 % 7) // 2) + max(s0 + s1, s2*2)", "(-s0 // 2)",
           "(s0 // (s1 - 1))", "(s0 % min(s1, s2))",
           "s0*2 + s1 - (s2 // 8)*3 + min(s0, s1) + 4",        // printer.h
           "s0*2 + s1 - ((s2 + 1) // 8)*3 + min(s0, s1) + 4",  // docs/design/symbolic.md
       }) {
    SymExpr e = parse(text, env);
    EXPECT_EQ(print(e), text);
    EXPECT_EQ(parse(print(e), env), e) << text;
  }
}

TEST_F(SymParser, BuildsCanonicalForms) {
  EXPECT_EQ(print(parse("2*s0 + s1", env)), "s0*2 + s1");
  EXPECT_EQ(print(parse("s1 + s0", env)), "s0 + s1");
  EXPECT_EQ(print(parse("(s0 + 1) * (s0 - 1)", env)), "s0*s0 - 1");
  EXPECT_EQ(print(parse("s0 - s0", env)), "0");
  EXPECT_EQ(parse("(4*s0 + s1) // 4", env), s0 + floordiv(s1, 4));
}

TEST_F(SymParser, FollowsPythonPrecedenceAndSemantics) {
  EXPECT_EQ(parse("1 + 2*3", env), SymExpr(7));
  EXPECT_EQ(parse("(1 + 2)*3", env), SymExpr(9));
  EXPECT_EQ(parse("7 - 2 - 1", env), SymExpr(4));
  EXPECT_EQ(parse("17 // 5 % 2", env), SymExpr(1));
  EXPECT_EQ(parse("-7 // 2", env), SymExpr(-4));
  EXPECT_EQ(parse("-7 % 3", env), SymExpr(2));
  EXPECT_EQ(parse("7 % -3", env), SymExpr(-2));
  EXPECT_EQ(parse("- -s0", env), s0);
  EXPECT_EQ(parse("s0 * -2", env), s0 * -2);
  EXPECT_EQ(parse("max(1, min(s0, 3)) # a comment", env), max(1, min(s0, 3)));
}

std::string parse_error(const std::string& text, const ShapeEnv& env) {
  return error_of<UserError>([&] { parse(text, env); });
}

TEST_F(SymParser, ErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("s0 +", env),
            "line 1:5: expected an integer, a symbol, 'min', 'max' or '(' but found end of input");
  EXPECT_EQ(parse_error("s0 + s9", env), "line 1:6: unknown symbol 's9'");
  EXPECT_EQ(parse_error("s0 +\n  foo", env), "line 2:3: unknown symbol 'foo'");
  EXPECT_EQ(parse_error("s0 // 0", env), "line 1:4: division by zero");
  EXPECT_EQ(parse_error("s0 % (s1 - s1)", env), "line 1:4: modulo by zero");
  EXPECT_EQ(parse_error("99999999999999999999", env),
            "line 1:1: integer 99999999999999999999 is out of range");
  EXPECT_EQ(parse_error("9223372036854775807 + 1", env), "line 1:21: symbolic integer overflow");
  EXPECT_EQ(parse_error("min(s0 s1)", env), "line 1:8: expected ',' but found 's1'");
  EXPECT_EQ(parse_error("max s0", env), "line 1:5: expected '(' but found 's0'");
  EXPECT_EQ(parse_error("(s0 + 1", env), "line 1:8: expected ')' but found end of input");
  EXPECT_EQ(parse_error("s0 s1", env), "line 1:4: expected end of input but found 's1'");
  EXPECT_EQ(parse_error("1.5", env),
            "line 1:1: expected an integer, a symbol, 'min', 'max' or '(' but found '1.5'");
  EXPECT_EQ(parse_error("s0 / 2", env), "line 1:4: unexpected character '/'");
}

}  // namespace
}  // namespace ember::sym
