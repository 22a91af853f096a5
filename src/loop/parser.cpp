#include "loop/parser.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "support/error.h"
#include "support/lexer.h"

namespace ember::loop {
namespace {

/// Loop text: `#` comments are dropped, and a malformed number (`1e`) reaches the parser whole.
constexpr std::string_view kPunctuation[] = {
    "//", "<=", "==", "!=", "&&", "||", "<-", "<<", ">>", "(", ")", "[", "]", "{", "}",
    ",",  ":",  "=",  "+",  "-",  "*",  "/",  "%",  "<",  ">", "!", "&", "|", "^"};
constexpr LexRules kRules{.punctuation = kPunctuation, .loose_numbers = true};

const std::set<std::string, std::less<>> kKeywords = {
    "kernel", "input", "output",   "inout",      "temp",     "strides", "for", "let",
    "if",     "else",  "alloc",    "accumulate", "true",     "false",   "min", "max",
    "select", "cast",  "parallel", "vectorized", "unrolled", "serial"};

class Parser : TokenCursor {
 public:
  explicit Parser(std::string_view text) : TokenCursor(lex(text, kRules).tokens) {}

  Kernel kernel() {
    Kernel k;
    expect("kernel");
    k.name = name("kernel name");
    expect("(");
    while (!accept(")")) {
      if (!k.size_vars.empty()) expect(",");
      k.size_vars.push_back(name("size variable"));
      size_vars_.insert(k.size_vars.back());
    }
    k.combo = accept("combo");
    expect("{");
    while (is_param()) k.buffers.push_back(param());
    std::vector<Stmt> stmts;
    while (!accept("}")) stmts.push_back(stmt());
    k.body = Block::make(std::move(stmts));
    expect_end();
    return k;
  }

  Expr standalone_expr(const ParseScope& scope) {
    size_vars_.insert(scope.size_vars.begin(), scope.size_vars.end());
    for (const auto& [n, t] : scope.vars) vars_.push_back({n, t});
    for (const auto& [n, t] : scope.buffers) buffers_.push_back({n, t});
    Expr e = expr();
    expect_end();
    return e;
  }

  /// "line L:C" of the last token consumed: where a node that failed to build ends.
  std::string where_last() const { return at_token(last()); }

 private:
  std::string name(const char* what) {
    const Token& t = peek();
    EMBER_CHECK(t.kind == TokenKind::Name && !kKeywords.count(t.text))
        << where() << ": expected " << what << " but found " << describe(t);
    next();
    return t.text;
  }
  DType dtype() {
    std::string n = peek().text;
    auto t = parse_dtype(n);
    EMBER_CHECK(peek().kind == TokenKind::Name && t)
        << where() << ": expected a dtype but found " << describe(peek());
    next();
    return *t;
  }

  bool is_param() const {
    return (at("input") || at("output") || at("inout") || at("temp")) &&
           peek(1).kind == TokenKind::Name;
  }

  BufferParam param() {
    BufferParam p;
    std::string role = peek().text;
    next();
    p.role = role == "input"    ? BufferRole::Input
             : role == "output" ? BufferRole::Output
             : role == "inout"  ? BufferRole::InOut
                                : BufferRole::Temp;
    p.name = name("buffer name");
    expect(":");
    p.dtype = dtype();
    p.sizes = dims();
    expect("strides");
    p.strides = dims();
    declare_buffer(p.name, p.dtype);
    return p;
  }

  std::vector<Expr> dims() {
    std::vector<Expr> out;
    expect("[");
    while (!accept("]")) {
      if (!out.empty()) expect(",");
      out.push_back(expr());
    }
    return out;
  }

  void declare_buffer(const std::string& n, DType t) {
    EMBER_CHECK(!find_buffer(n)) << where() << ": buffer '" << n << "' is declared twice";
    buffers_.push_back({n, t});
  }
  const DType* find_buffer(const std::string& n) const {
    for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) {
      if (it->first == n) return &it->second;
    }
    return nullptr;
  }

  Stmt body() {
    expect("{");
    std::vector<Stmt> stmts;
    while (!accept("}")) stmts.push_back(stmt());
    return Block::make(std::move(stmts));
  }

  Stmt stmt() {
    if (accept("for")) {
      expect("(");
      std::string v = name("loop variable");
      expect(",");
      Expr mn = expr();
      expect(",");
      Expr ext = expr();
      expect(")");
      ForKind kind = ForKind::Serial;
      Expr when;
      if (accept("parallel")) {
        kind = ForKind::Parallel;
        if (accept("if")) when = expr();
      } else if (accept("vectorized"))
        kind = ForKind::Vectorized;
      else if (accept("unrolled"))
        kind = ForKind::Unrolled;
      else
        accept("serial");
      Expr var = Var::make(v);
      vars_.push_back({v, kIndexType});
      Stmt b = body();
      vars_.pop_back();
      return For::make(var, mn, ext, kind, b, when);
    }
    if (accept("let")) {
      std::string v = name("variable");
      expect("=");
      Expr value = expr();
      vars_.push_back({v, value.dtype()});
      Stmt b = body();
      vars_.pop_back();
      return Let::make(Var::make(v, value.dtype()), value, b);
    }
    if (accept("if")) {
      Expr cond = expr();
      Stmt then_case = body();
      Stmt else_case;
      if (accept("else")) else_case = body();
      return IfThenElse::make(cond, then_case, else_case);
    }
    if (accept("alloc")) {
      std::string b = name("buffer name");
      expect(":");
      DType t = dtype();
      std::vector<Expr> sizes = dims();
      declare_buffer(b, t);
      Stmt inner = body();
      buffers_.pop_back();
      return Allocate::make(b, t, sizes, inner);
    }
    if (accept("accumulate")) {
      auto op = parse_reduce_op(peek().text);
      EMBER_CHECK(peek().kind == TokenKind::Name && op)
          << where() << ": expected a reduction op but found " << describe(peek());
      next();
      std::vector<std::string> bufs;
      if (accept("(")) {
        while (!accept(")")) {
          if (!bufs.empty()) expect(",");
          bufs.push_back(buffer_ref());
        }
      } else {
        bufs.push_back(buffer_ref());
      }
      expect("[");
      Expr index = expr();
      expect("]");
      expect("<-");
      std::vector<Expr> values;
      if (reduce_op_num_values(*op) == 1) {
        values.push_back(expr());
      } else {
        expect("(");
        while (!accept(")")) {
          if (!values.empty()) expect(",");
          values.push_back(expr());
        }
      }
      return Accumulate::make(*op, bufs, index, values);
    }
    std::string b = buffer_ref();
    expect("[");
    Expr index = expr();
    expect("]");
    expect("=");
    return Store::make(b, index, expr());
  }

  /// A declared buffer's name.
  std::string buffer_ref() {
    std::string b = name("buffer name");
    EMBER_CHECK(find_buffer(b)) << where() << ": unknown buffer '" << b << "'";
    return b;
  }

  std::vector<Expr> call_args() {
    std::vector<Expr> args;
    expect("(");
    while (!accept(")")) {
      if (!args.empty()) expect(",");
      args.push_back(expr());
    }
    return args;
  }

  Expr number_literal(DType t) {
    bool negative = accept("-");
    const Token& tok = peek();
    std::string text = (negative ? "-" : "") + tok.text;
    if (is_float(t) && tok.kind == TokenKind::Name && (tok.text == "inf" || tok.text == "nan")) {
      next();
      double v = tok.text == "inf" ? std::numeric_limits<double>::infinity()
                                   : std::numeric_limits<double>::quiet_NaN();
      return FloatImm::make(t, negative ? -v : v);
    }
    EMBER_CHECK(tok.is_number()) << where() << ": expected a number but found " << describe(tok);
    const char* first = text.data();
    const char* last = text.data() + text.size();
    if (is_float(t)) {
      double v = 0;
      std::from_chars_result r;
      if (t == DType::Float32) {
        float f = 0;
        r = std::from_chars(first, last, f);
        v = f;
      } else {
        r = std::from_chars(first, last, v);
      }
      EMBER_CHECK(r.ec == std::errc() && r.ptr == last)
          << where() << ": bad " << dtype_name(t) << " literal '" << text << "'";
      next();
      return FloatImm::make(t, v);
    }
    int64_t v = 0;
    auto r = std::from_chars(first, last, v);
    EMBER_CHECK(r.ec == std::errc() && r.ptr == last)
        << where() << ": bad integer literal '" << text << "'";
    next();
    return IntImm::make(t, v);
  }

  Expr expr() {
    const Token& tok = peek();
    if (tok.is_number() || (at("-") && peek(1).is_number())) {
      return number_literal(kIndexType);
    }
    if (accept("(")) {
      Expr a = expr();
      if (accept(")")) return a;
      const Token& op = peek();
      static const std::pair<const char*, ExprKind> kOps[] = {
#define EMBER_LOOP_BINARY(Name, Symbol, Cat) {Symbol, ExprKind::Name},
#include "loop/nodes.def"
      };
      for (const auto& [symbol, kind] : kOps) {
        if (op.kind == TokenKind::Punct && op.text == symbol) {
          next();
          Expr b = expr();
          expect(")");
          return make_binary(kind, a, b);
        }
      }
      EMBER_CHECK(false) << where() << ": expected a binary operator but found " << describe(op);
    }
    if (accept("!")) return Not::make(expr());
    EMBER_CHECK(tok.kind == TokenKind::Name)
        << where() << ": expected an expression but found " << describe(tok);
    std::string n = tok.text;
    if (n == "true" || n == "false") {
      next();
      return bool_imm(n == "true");
    }
    if (at("(", 1)) {
      if (auto t = parse_dtype(n)) {
        next();
        expect("(");
        Expr lit = number_literal(*t);
        expect(")");
        return lit;
      }
      if (n == "min" || n == "max" || n == "select" || parse_call_fn(n)) {
        next();
        std::vector<Expr> args = call_args();
        if (n == "select") {
          EMBER_CHECK(args.size() == 3) << where() << ": select takes 3 arguments";
          return Select::make(args[0], args[1], args[2]);
        }
        if (n == "min" || n == "max") {
          EMBER_CHECK(args.size() == 2) << where() << ": " << n << " takes 2 arguments";
          return n == "min" ? Min::make(args[0], args[1]) : Max::make(args[0], args[1]);
        }
        CallFn fn = *parse_call_fn(n);
        EMBER_CHECK(static_cast<int>(args.size()) == call_fn_arity(fn))
            << where() << ": " << n << " takes " << call_fn_arity(fn) << " arguments";
        return Call::make(fn, args);
      }
      EMBER_CHECK(false) << where() << ": unknown function '" << n << "'";
    }
    if (n == "cast") {
      next();
      expect("<");
      DType t = dtype();
      expect(">");
      expect("(");
      Expr v = expr();
      expect(")");
      return Cast::make(t, v);
    }
    std::string id = name("a name");
    if (accept("[")) {
      const DType* t = find_buffer(id);
      EMBER_CHECK(t) << where() << ": unknown buffer '" << id << "'";
      Expr index = expr();
      expect("]");
      return Load::make(*t, id, index);
    }
    for (auto it = vars_.rbegin(); it != vars_.rend(); ++it) {
      if (it->first == id) return Var::make(id, it->second);
    }
    EMBER_CHECK(size_vars_.count(id)) << where() << ": unknown name '" << id << "'";
    return SizeVar::make(id);
  }

  std::set<std::string> size_vars_;
  std::vector<std::pair<std::string, DType>> vars_;
  std::vector<std::pair<std::string, DType>> buffers_;
};

/// Runs `f`, turning invalid-IR internal errors from make() into user errors at the parser's
/// position.
template <typename F>
auto guarded(Parser& p, F&& f) {
  try {
    return f();
  } catch (const InternalError& e) {
    std::string msg = e.what();
    // Keep the reason ("Add of i64 and f32"), drop the bug-report boilerplate.
    size_t start = msg.find(": check failed: ");
    size_t reason = start == std::string::npos ? std::string::npos : msg.find(": ", start + 16);
    size_t stop = msg.find("\nthis is a bug");
    std::string text =
        reason == std::string::npos ? msg : msg.substr(reason + 2, stop - reason - 2);
    throw UserError(p.where_last() + ": invalid IR: " + text);
  }
}

}  // namespace

Kernel parse_kernel(std::string_view text) {
  Parser p(text);
  return guarded(p, [&] { return p.kernel(); });
}

Expr parse_expr(std::string_view text, const ParseScope& scope) {
  Parser p(text);
  return guarded(p, [&] { return p.standalone_expr(scope); });
}

}  // namespace ember::loop
