#include "support/lexer.h"

#include <cctype>
#include <charconv>

#include "support/error.h"

namespace ember {

std::string location(int line, int col) {
  return "line " + std::to_string(line) + ":" + std::to_string(col);
}

std::string decode_string(std::string_view s, int line, int col, size_t& len) {
  std::string out;
  size_t k = 1;
  while (true) {
    EMBER_CHECK(k < s.size() && s[k] != '\n') << location(line, col) << ": unterminated string";
    char c = s[k];
    if (c == '"') break;
    if (c != '\\') {
      out += c;
      ++k;
      continue;
    }
    char e = k + 1 < s.size() ? s[k + 1] : ' ';
    static constexpr std::string_view kEscapes = "\\\"ntr", kMeanings = "\\\"\n\t\r";
    if (size_t which = kEscapes.find(e); which != std::string_view::npos) {
      out += kMeanings[which];
      k += 2;
      continue;
    }
    bool hex = e == 'x' && k + 3 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[k + 2])) &&
               std::isxdigit(static_cast<unsigned char>(s[k + 3]));
    EMBER_CHECK(hex) << location(line, col + static_cast<int>(k))
                     << ": expected an escape (\\\\ \\\" \\n \\t \\r \\xNN) after '\\'";
    unsigned byte = 0;
    std::from_chars(s.data() + k + 2, s.data() + k + 4, byte, 16);
    out += static_cast<char>(byte);
    k += 4;
  }
  len = k + 1;
  return out;
}

namespace {
bool is_punctuation(std::string_view text, const LexRules& rules) {
  for (std::string_view p : rules.punctuation) {
    if (p == text) return true;
  }
  return false;
}
}  // namespace

Lexed lex(std::string_view src, const LexRules& rules) {
  Lexed out;
  int line = 1, col = 1;
  size_t i = 0;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i) {
      if (src[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  auto is_digit = [&](size_t j) {
    return j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]));
  };
  while (i < src.size()) {
    char c = src[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      advance(1);
      continue;
    }
    Token t;
    t.line = line;
    t.col = col;
    size_t j = i;
    if (c == '#') {
      size_t end = std::min(src.find('\n', i), src.size());
      if (rules.keep_comments) {
        t.text = std::string(src.substr(i + 1, end - i - 1));
        t.col = col + 1;
        out.comments[line] = std::move(t);
      }
      advance(end - i);
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (j < src.size() && (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
        ++j;
      t.kind = TokenKind::Name;
    } else if (is_digit(i)) {
      t.kind = TokenKind::Int;
      while (is_digit(j)) ++j;
      if (j < src.size() && src[j] == '.' && (rules.loose_numbers || is_digit(j + 1))) {
        t.kind = TokenKind::Float;
        ++j;
        while (is_digit(j)) ++j;
      }
      size_t sign = j + 1 < src.size() && (src[j + 1] == '+' || src[j + 1] == '-') ? 1 : 0;
      if (j < src.size() && (src[j] == 'e' || src[j] == 'E') &&
          (rules.loose_numbers || is_digit(j + 1 + sign))) {
        t.kind = TokenKind::Float;
        j += 1 + sign;
        while (is_digit(j)) ++j;
      }
    } else if (c == '%' && rules.values && (is_digit(j + 1) || !is_punctuation("%", rules))) {
      ++j;
      while (is_digit(j)) ++j;
      EMBER_CHECK(j > i + 1) << location(line, col) << ": expected a value id after '%'";
      t.kind = TokenKind::Value;
    } else if (c == '"' && rules.strings) {
      size_t len = 0;
      t.bytes = decode_string(src.substr(i), line, col, len);
      j = i + len;
      t.kind = TokenKind::String;
    } else {
      for (std::string_view p : rules.punctuation) {
        if (p.size() > j - i && src.substr(i, p.size()) == p) j = i + p.size();
      }
      EMBER_CHECK(j > i) << location(line, col) << ": unexpected character '" << c << "'";
      t.kind = TokenKind::Punct;
    }
    t.text = std::string(src.substr(i, j - i));
    advance(j - i);
    out.tokens.push_back(std::move(t));
  }
  Token end;
  end.line = line;
  end.col = col;
  out.tokens.push_back(end);
  return out;
}

bool TokenCursor::at(std::string_view text, size_t ahead) const {
  const Token& t = peek(ahead);
  return (t.kind == TokenKind::Name || t.kind == TokenKind::Punct) && t.text == text;
}

bool TokenCursor::accept(std::string_view text) {
  if (!at(text)) return false;
  ++pos_;
  return true;
}

void TokenCursor::expect(std::string_view text) {
  EMBER_CHECK(accept(text)) << where() << ": expected '" << text << "' but found "
                            << describe(peek());
}

void TokenCursor::expect_end() const {
  EMBER_CHECK(peek().kind == TokenKind::End)
      << where() << ": expected end of input but found " << describe(peek());
}

std::string TokenCursor::describe(const Token& t) {
  return t.kind == TokenKind::End ? "end of input" : "'" + t.text + "'";
}

}  // namespace ember
