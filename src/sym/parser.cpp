#include "sym/parser.h"

#include <charconv>

#include "support/error.h"
#include "support/lexer.h"

namespace ember::sym {
namespace {

constexpr std::string_view kPunctuation[] = {"//", "+", "-", "*", "%", "(", ")", ","};
constexpr LexRules kRules{.punctuation = kPunctuation};

class Parser : TokenCursor {
 public:
  Parser(std::string_view text, const ShapeEnv& env)
      : TokenCursor(lex(text, kRules).tokens), env_(env) {}

  SymExpr parse() {
    SymExpr e = expr();
    expect_end();
    return e;
  }

 private:
  SymExpr expr() {
    SymExpr e = term();
    while (at("+") || at("-")) {
      Token op = next();
      SymExpr rhs = term();
      e = build(op, [&] { return op.text == "+" ? e + rhs : e - rhs; });
    }
    return e;
  }

  SymExpr term() {
    SymExpr e = unary();
    while (at("*") || at("//") || at("%")) {
      Token op = next();
      SymExpr rhs = unary();
      EMBER_CHECK(op.text == "*" || rhs.as_constant() != 0)
          << at_token(op) << ": " << (op.text == "//" ? "division" : "modulo") << " by zero";
      e = build(op, [&] {
        return op.text == "*" ? e * rhs : op.text == "//" ? floordiv(e, rhs) : mod(e, rhs);
      });
    }
    return e;
  }

  SymExpr unary() {
    if (at("-")) {
      Token op = next();
      SymExpr e = unary();
      return build(op, [&] { return -e; });
    }
    return primary();
  }

  SymExpr primary() {
    const Token& t = peek();
    if (t.kind == TokenKind::Int) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
      EMBER_CHECK(ec == std::errc() && end == t.text.data() + t.text.size())
          << where() << ": integer " << t.text << " is out of range";
      next();
      return v;
    }
    if (at("min") || at("max")) {
      Token op = next();
      expect("(");
      SymExpr a = expr();
      expect(",");
      SymExpr b = expr();
      expect(")");
      return op.text == "min" ? min(a, b) : max(a, b);
    }
    if (t.kind == TokenKind::Name) {
      const SymbolInfo* s = env_.find(t.text);
      EMBER_CHECK(s != nullptr) << where() << ": unknown symbol '" << t.text << "'";
      next();
      return env_.symbol(s->id);
    }
    EMBER_CHECK(accept("(")) << where()
                             << ": expected an integer, a symbol, 'min', 'max' or '(' but found "
                             << describe(t);
    SymExpr e = expr();
    expect(")");
    return e;
  }

  /// Runs a builder; an overflow becomes a UserError at the operator.
  template <typename F>
  SymExpr build(const Token& op, F&& f) {
    try {
      return f();
    } catch (const Unsupported& e) {
      throw UserError(at_token(op) + ": " + e.what());
    }
  }

  const ShapeEnv& env_;
};

}  // namespace

SymExpr parse(std::string_view text, const ShapeEnv& env) {
  return Parser(text, env).parse();
}

}  // namespace ember::sym
