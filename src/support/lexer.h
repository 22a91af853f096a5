/// \file
/// The lexer and token cursor that ember's text parsers share (graph/parser.h, loop/parser.h).
/// Each parser describes its tokens as data (LexRules), splits its text with lex(), and reads the
/// tokens through a TokenCursor.
///
/// Tokens, after optional whitespace:
///   NAME    [A-Za-z_][A-Za-z0-9_]*
///   NUMBER  DIGITS ['.' DIGITS] [('e' | 'E') ['+' | '-'] DIGITS]: an Int, or a Float when it has
///           a fraction or an exponent (see LexRules::loose_numbers for the optional digits)
///   VALUE   '%' DIGITS                                  only with LexRules::values
///   STRING  '"' bytes, with \\ \" \n \t \r \xNN escapes, '"'   only with LexRules::strings
///   PUNCT   the longest entry of LexRules::punctuation that the text starts with
/// `#` starts a comment to the end of the line, dropped or kept (LexRules::keep_comments).
///
/// Errors are UserErrors "line L:C: <what>" (lines and columns count from 1, a column in bytes):
/// "unexpected character 'c'" where no token starts, and the value and string errors below.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

enum class TokenKind : uint8_t { Name, Int, Float, Value, String, Punct, End };

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;   ///< as written (a String with its quotes and escapes)
  std::string bytes;  ///< a String's decoded bytes
  int line = 1, col = 1;

  bool is_number() const { return kind == TokenKind::Int || kind == TokenKind::Float; }
};

/// What a parser's text holds besides names and numbers.
struct LexRules {
  /// The punctuation tokens; the longest one that matches wins, whatever the order.
  std::span<const std::string_view> punctuation;
  /// `%N` is a Value token; a `%` without a digit after it is the punctuation `%` when that is in
  /// `punctuation` (the modulo of a symbolic size), else an error "expected a value id after
  /// '%'". Without it, `%` is an ordinary punctuation character.
  bool values = false;
  /// `"..."` is a String token (decode_string's escapes and errors).
  bool strings = false;
  /// Comments go to Lexed::comments by line, rather than being dropped.
  bool keep_comments = false;
  /// A '.' or an exponent after a number's digits belongs to the number even with no digit after
  /// it (`1.`, `1e`, `1e+`), so the parser sees, and rejects, the malformed literal whole. Without
  /// it, they belong to the number only when a digit follows (`1.x` is Int `1`, then `.`).
  bool loose_numbers = false;
};

struct Lexed {
  /// The tokens, ending with an End token at the end of the text.
  std::vector<Token> tokens;
  /// With keep_comments: the text after each `#`, by line (one comment per line at most); its
  /// `col` is that of the byte after the `#`.
  std::map<int, Token> comments;
};

/// Splits `text` into tokens by `rules`. Throws UserError as described above.
Lexed lex(std::string_view text, const LexRules& rules);

/// "line L:C".
std::string location(int line, int col);

/// Decodes the string literal at the start of `s` (s[0] is '"'), whose first byte sits at
/// line:col; sets `len` to the literal's length in `s`. Throws UserError "unterminated string"
/// when the line or text ends first, and "expected an escape (...) after '\'" at a bad escape.
std::string decode_string(std::string_view s, int line, int col, size_t& len);

/// Reads a token list front to back. The shared part of the parsers: looking ahead, taking
/// punctuation and keywords, and the "expected X but found Y" errors.
class TokenCursor {
 public:
  /// `tokens` ends with an End token (as lex() leaves it).
  explicit TokenCursor(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  /// The token `ahead` places past the current one; past the end, the End token.
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  /// The token consumed last (the first token when none was).
  const Token& last() const { return tokens_[pos_ > 0 ? pos_ - 1 : 0]; }
  /// Consumes the current token and returns it.
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  /// Whether that token is the name or punctuation `text`.
  bool at(std::string_view text, size_t ahead = 0) const;
  /// Consumes the current token when it is the name or punctuation `text`.
  bool accept(std::string_view text);
  /// Consumes the name or punctuation `text`; throws UserError "expected 'text' but found ..."
  /// otherwise.
  void expect(std::string_view text);
  /// Throws UserError "expected end of input but found ..." unless all tokens are consumed.
  void expect_end() const;

  /// "line L:C" of the current token.
  std::string where() const { return at_token(peek()); }
  /// "line L:C" of `t`.
  static std::string at_token(const Token& t) { return location(t.line, t.col); }
  /// How an error names `t`: "'text'", or "end of input".
  static std::string describe(const Token& t);

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace ember
