#include "support/lexer.h"

#include <gtest/gtest.h>

#include "support/error.h"

namespace ember {
namespace {

constexpr std::string_view kPunctuation[] = {"(", ")", ",", "<", "-", "<-", "<<", ":", "::", "."};
constexpr LexRules kPlain{.punctuation = kPunctuation};
constexpr LexRules kFull{
    .punctuation = kPunctuation, .values = true, .strings = true, .keep_comments = true};
constexpr LexRules kLoose{.punctuation = kPunctuation, .loose_numbers = true};

/// "Kind:text@line:col" for each token, End included, space-separated.
std::string tokens(std::string_view text, const LexRules& rules) {
  static const char* const kKinds[] = {"Name", "Int", "Float", "Value", "String", "Punct", "End"};
  std::string out;
  for (const Token& t : lex(text, rules).tokens) {
    if (!out.empty()) out += " ";
    out += std::string(kKinds[static_cast<int>(t.kind)]) + ":" + t.text + "@" +
           std::to_string(t.line) + ":" + std::to_string(t.col);
  }
  return out;
}

/// The message of the UserError that lexing `text` throws.
std::string lex_error(std::string_view text, const LexRules& rules) {
  try {
    lex(text, rules);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Lex, SplitsNamesNumbersAndPunctuationWithTheirPositions) {
  EXPECT_EQ(tokens("f(x_1, 42)\n  _y 3.5", kPlain),
            "Name:f@1:1 Punct:(@1:2 Name:x_1@1:3 Punct:,@1:6 Int:42@1:8 Punct:)@1:10 "
            "Name:_y@2:3 Float:3.5@2:6 End:@2:9");
  EXPECT_EQ(tokens("", kPlain), "End:@1:1");
  EXPECT_EQ(tokens("a\n\n", kPlain), "Name:a@1:1 End:@3:1");
}

TEST(Lex, TakesTheLongestPunctuationWhateverTheTableOrder) {
  EXPECT_EQ(tokens("<-<<<::-:", kPlain),
            "Punct:<-@1:1 Punct:<<@1:3 Punct:<@1:5 Punct:::@1:6 Punct:-@1:8 Punct::@1:9 End:@1:10");
}

TEST(Lex, ReadsAFractionOrExponentOnlyBeforeADigit) {
  EXPECT_EQ(tokens("1e5 2.5E-3 7e- 8.x", kPlain),
            "Float:1e5@1:1 Float:2.5E-3@1:5 Int:7@1:12 Name:e@1:13 Punct:-@1:14 Int:8@1:16 "
            "Punct:.@1:17 Name:x@1:18 End:@1:19");
}

TEST(Lex, LooseNumbersKeepAMalformedNumberWhole) {
  EXPECT_EQ(tokens("1. 7e+ 3e 2.5", kLoose),
            "Float:1.@1:1 Float:7e+@1:4 Float:3e@1:8 Float:2.5@1:11 End:@1:14");
}

TEST(Lex, ReadsValuesAndStringsOnlyWhenAsked) {
  EXPECT_EQ(tokens("%12 \"a\\n\\x41\"", kFull), "Value:%12@1:1 String:\"a\\n\\x41\"@1:5 End:@1:14");
  EXPECT_EQ(lex("\"a\\n\\x41\"", kFull).tokens[0].bytes, "a\nA");
  EXPECT_EQ(lex_error("%12", kPlain), "line 1:1: unexpected character '%'");
  EXPECT_EQ(lex_error("\"a\"", kPlain), "line 1:1: unexpected character '\"'");
}

TEST(Lex, KeepsCommentsByLineOrDropsThem) {
  Lexed kept = lex("a # one\n  # two\nb", kFull);
  EXPECT_EQ(kept.tokens.size(), 3u);
  ASSERT_EQ(kept.comments.size(), 2u);
  EXPECT_EQ(kept.comments.at(1).text, " one");
  EXPECT_EQ(kept.comments.at(1).col, 4);
  EXPECT_EQ(kept.comments.at(2).text, " two");
  EXPECT_EQ(kept.comments.at(2).col, 4);
  EXPECT_EQ(tokens("a # one\n  # two\nb", kPlain), "Name:a@1:1 Name:b@3:1 End:@3:2");
  EXPECT_TRUE(lex("a # one", kPlain).comments.empty());
}

TEST(Lex, ReportsWhereNoTokenStarts) {
  EXPECT_EQ(lex_error("f(x)\n  a @", kPlain), "line 2:5: unexpected character '@'");
  EXPECT_EQ(lex_error("x % 1", kFull), "line 1:3: expected a value id after '%'");
  EXPECT_EQ(lex_error("\n \"abc", kFull), "line 2:2: unterminated string");
  EXPECT_EQ(lex_error("\"ab\\q\"", kFull),
            "line 1:4: expected an escape (\\\\ \\\" \\n \\t \\r \\xNN) after '\\'");
}

/// The message of the UserError that `f` throws.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(TokenCursor, AcceptsNamesAndPunctuationAndNamesWhatItFound) {
  TokenCursor c(lex("f(1, x)", kPlain).tokens);
  EXPECT_TRUE(c.at("f"));
  EXPECT_TRUE(c.at("(", 1));
  EXPECT_FALSE(c.at("1", 2));  // a number is neither a name nor punctuation
  EXPECT_FALSE(c.accept("("));
  c.expect("f");
  EXPECT_EQ(c.last().text, "f");
  EXPECT_TRUE(c.accept("("));
  EXPECT_EQ(c.next().text, "1");
  EXPECT_EQ(c.where(), "line 1:4");
  EXPECT_EQ(error_of([&] { c.expect(")"); }), "line 1:4: expected ')' but found ','");
  EXPECT_EQ(error_of([&] { c.expect_end(); }), "line 1:4: expected end of input but found ','");
  c.expect(",");
  c.expect("x");
  c.expect(")");
  c.expect_end();
  EXPECT_EQ(c.peek(5).kind, TokenKind::End);
  EXPECT_EQ(c.next().kind, TokenKind::End);  // stays at the end
  EXPECT_EQ(error_of([&] { c.expect("y"); }), "line 1:8: expected 'y' but found end of input");
}

}  // namespace
}  // namespace ember
