#include "graph/parser.h"

#include <charconv>
#include <map>
#include <optional>

#include "graph/pinned_symbols.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "support/error.h"
#include "support/lexer.h"
#include "sym/parser.h"

namespace ember::graph {
namespace {

std::string sizes_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + d[i].str();
  return s + "]";
}

/// Bytes that end an unquoted input name (the printer quotes names that hold one).
bool is_blank(char c) {
  auto u = static_cast<unsigned char>(c);
  return u <= 0x20 || u == 0x7f;
}

/// Graph text: `%N` values, string literals, and `#` comments kept by line for input annotations.
constexpr std::string_view kPunctuation[] = {"::", "<-", "(", ")", "[", "]", "{", "}",  ",", ":",
                                             "=",  "+",  "-", "<", ">", ".", "*", "//", "%"};
constexpr LexRules kRules{
    .punctuation = kPunctuation, .values = true, .strings = true, .keep_comments = true};

/// Name -> enumerator for every code of `E` (int8 range) that `name_of` names; the `<N>` fallback
/// names of unnamed codes are parsed separately. Built from the printer's own names, so the two
/// cannot drift apart.
template <typename E, typename F>
std::map<std::string, E, std::less<>> names_of(F name_of) {
  std::map<std::string, E, std::less<>> out;
  for (int code = -128; code < 128; ++code) {
    E e = static_cast<E>(code);
    std::string n = name_of(e);
    if (n.find('<') == std::string::npos) out.emplace(n, e);
  }
  return out;
}

const std::map<std::string, DType, std::less<>>& dtype_names() {
  static const auto names = names_of<DType>(dtype_name);
  return names;
}
const std::map<std::string, DeviceKind, std::less<>>& device_kind_names() {
  static const auto names = names_of<DeviceKind>([](DeviceKind k) {
    return device_name(Device{k, -1});
  });
  return names;
}
const std::map<std::string, Layout, std::less<>>& layout_names() {
  static const auto names = names_of<Layout>(layout_name);
  return names;
}
const std::map<std::string, MemoryFormat, std::less<>>& memory_format_names() {
  static const auto names = names_of<MemoryFormat>(memory_format_name);
  return names;
}

class Parser : TokenCursor {
 public:
  explicit Parser(std::string_view text) : Parser(lex(text, kRules)) {}

  Graph graph() {
    expect("graph");
    expect("{");
    while (accept("symbol")) symbol();
    while (at("input") || at("const")) input();
    while (!at("mutate") && !at("return")) node();
    while (accept("mutate")) mutation();
    expect("return");
    expect("(");
    while (!accept(")")) {
      if (!g_.outputs.empty()) expect(",");
      g_.outputs.push_back(use_value());
    }
    expect("}");
    expect_end();
    number_values();
    // The checks above mirror the verifier's; a graph that still fails it is a parser bug.
    check_graph(g_);
    return std::move(g_);
  }

 private:
  /// Where a value is defined, and as what.
  struct Def {
    TensorType type;
    int32_t node = -1;  ///< -1: a graph input
    int32_t index = 0;  ///< output position, or input position
    std::string where;  ///< "line L:C" of its `%N`
  };

  /// An output of the node being read; defined once its arguments are read.
  struct Typed {
    ValueId id = -1;
    TensorType type;
    std::string where;
  };

  explicit Parser(Lexed lexed)
      : TokenCursor(std::move(lexed.tokens)), comments_(std::move(lexed.comments)) {}

  // ---- tokens

  std::string ident(const char* what) {
    const Token& t = peek();
    EMBER_CHECK(t.kind == TokenKind::Name)
        << where() << ": expected " << what << " but found " << describe(t);
    next();
    return t.text;
  }

  /// An integer, with an optional '-' (already consumed when `negative`).
  int64_t integer(const char* what, bool negative = false) {
    if (!negative) negative = accept("-");
    const Token& t = peek();
    EMBER_CHECK(t.kind == TokenKind::Int)
        << where() << ": expected " << what << " but found " << describe(t);
    std::string text = (negative ? "-" : "") + t.text;
    int64_t v = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    EMBER_CHECK(r.ec == std::errc() && r.ptr == text.data() + text.size())
        << where() << ": integer " << text << " is out of range";
    next();
    return v;
  }

  // ---- values

  ValueId value_id() {
    const Token& t = peek();
    EMBER_CHECK(t.kind == TokenKind::Value)
        << where() << ": expected a value (%N) but found " << describe(t);
    ValueId id = 0;
    auto r = std::from_chars(t.text.data() + 1, t.text.data() + t.text.size(), id);
    EMBER_CHECK(r.ec == std::errc()) << where() << ": value id " << t.text << " is out of range";
    next();
    return id;
  }

  /// A value read here: it must be defined already.
  ValueId use_value() {
    std::string at_value = where();
    ValueId id = value_id();
    EMBER_CHECK(defs_.count(id)) << at_value << ": unknown value %" << id;
    return id;
  }

  void define(ValueId id, Def def) {
    auto it = defs_.find(id);
    EMBER_CHECK(it == defs_.end()) << def.where << ": value %" << id
                                   << " is defined twice (first at " << it->second.where << ")";
    defs_.emplace(id, std::move(def));
  }

  /// Lays the definitions out as Graph::values: ids must run 0, 1, 2, ... without a gap.
  void number_values() {
    ValueId expected = 0;
    for (auto& [id, def] : defs_) {
      EMBER_CHECK(id == expected) << def.where << ": value %" << id << " is defined but %"
                                  << expected << " is not (value ids count up from %0)";
      g_.values.push_back(Value{std::move(def.type), def.node, def.index});
      ++expected;
    }
  }

  // ---- types

  /// The N of an unnamed code's `name<N>`, after the name; `<-` is one token, so `<-1>` comes as
  /// `<-` and 1.
  template <typename E>
  E enum_code() {
    bool negative = accept("<-");
    if (!negative) expect("<");
    std::string at_code = where();
    int64_t code = integer("an enum code", negative);
    EMBER_CHECK(code >= -128 && code <= 127)
        << at_code << ": enum code " << code << " is out of range";
    expect(">");
    return static_cast<E>(code);
  }
  bool at_fallback(std::string_view name) const { return at(name) && (at("<", 1) || at("<-", 1)); }

  /// A named enumerator of `names`, or the `fallback<N>` form; nullopt (nothing consumed) when the
  /// current token is neither.
  template <typename E>
  std::optional<E> enum_value(const std::map<std::string, E, std::less<>>& names,
                              std::string_view fallback) {
    if (at_fallback(fallback)) {
      next();
      return enum_code<E>();
    }
    if (peek().kind != TokenKind::Name) return std::nullopt;
    auto it = names.find(peek().text);
    if (it == names.end()) return std::nullopt;
    next();
    return it->second;
  }

  /// A device kind (already read) and its optional `:index`.
  Device device_index(DeviceKind kind) {
    Device d{kind, -1};
    if (!accept(":")) return d;
    std::string at_index = where();
    int64_t index = integer("a device index");
    EMBER_CHECK(index >= 0 && index <= 127)
        << at_index << ": device index " << index << " is out of range";
    d.index = static_cast<int8_t>(index);
    return d;
  }

  Dims dims(const char* close, bool sizes) {
    Dims out;
    while (!accept(close)) {
      if (!out.empty()) expect(",");
      std::string at_dim = where();
      DimExpr d = dim(sizes ? "a size" : "a stride");
      EMBER_CHECK(!sizes || !d.is_constant() || d.constant() >= 0)
          << at_dim << ": negative size " << d.str();
      out.push_back(d);
    }
    return out;
  }

  // ---- symbols and symbolic sizes

  /// `symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"`: the next symbol of the graph's ShapeEnv.
  void symbol() {
    std::string at_name = where();
    std::string name = ident("a symbol name");
    std::string expected = "s" + std::to_string(g_.symbols.symbols().size());
    EMBER_CHECK(name == expected) << at_name << ": expected symbol " << expected << " (symbols are "
                                  << "numbered in order) but found " << name;
    expect(":");
    expect("[");
    sym::Range range{bound(), 0};
    expect(",");
    range.hi = bound();
    expect("]");
    EMBER_CHECK(range.lo <= range.hi) << at_name << ": empty range " << range.str();
    expect("hint");
    std::string at_hint = where();
    int64_t hint = integer("a hint");
    EMBER_CHECK(range.contains(hint))
        << at_hint << ": hint " << hint << " is outside the range " << range.str();
    std::string source;
    if (peek().kind == TokenKind::String) source = next().bytes;
    g_.symbols.create_symbol(hint, std::move(source), range);
  }

  /// A range bound: an integer, `inf` or `-inf`.
  int64_t bound() {
    bool negative = accept("-");
    if (accept("inf")) return negative ? sym::Range::kNegInf : sym::Range::kPosInf;
    return integer("a bound", negative);
  }

  /// Tokens ahead up to the next ',', ']', ')' or '}' outside parentheses.
  size_t span_to_delimiter() const {
    size_t n = 0;
    int depth = 0;
    for (;; ++n) {
      const Token& t = peek(n);
      if (t.kind == TokenKind::End) break;
      if (t.kind == TokenKind::Punct) {
        if (t.text == "(") {
          ++depth;
        } else if (depth == 0 &&
                   (t.text == "," || t.text == "]" || t.text == ")" || t.text == "}")) {
          break;
        } else if (t.text == ")") {
          --depth;
        }
      }
    }
    return n;
  }

  /// A size expression over the graph's symbols, or an integer.
  DimExpr dim(const char* what) {
    if (!at_symbolic()) return integer(what);
    size_t n = span_to_delimiter();
    std::string at_expr = where();
    std::string text;
    for (size_t i = 0; i < n; ++i) {
      if (i) text += " ";
      text += next().text;
    }
    try {
      return DimExpr(sym::parse(text, g_.symbols));
    } catch (const UserError& e) {
      EMBER_CHECK(false) << at_expr << ": in the size expression '" << text << "': " << e.what();
    }
    return 0;  // unreachable
  }

  /// A symbolic size expression starts here: a symbol, min/max, '(' or '-' before one of them.
  bool at_symbolic() const {
    size_t k = at("-") ? 1 : 0;
    const Token& t = peek(k);
    if (t.kind == TokenKind::Punct) return t.text == "(";
    if (t.kind != TokenKind::Name) return false;
    if (t.text == "min" || t.text == "max") return true;
    return g_.symbols.find(t.text) != nullptr;
  }

  TensorType type() {
    TensorType t;
    std::optional<DType> dtype = enum_value(dtype_names(), "dtype");
    EMBER_CHECK(dtype) << where() << ": expected a dtype but found " << describe(peek());
    t.dtype = *dtype;
    expect("[");
    t.sizes = dims("]", /*sizes=*/true);
    std::string at_strides = where();
    if (accept("{")) {
      t.strides = dims("}", /*sizes=*/false);
      EMBER_CHECK(t.strides.size() == t.sizes.size())
          << at_strides << ": " << t.strides.size() << " strides for " << t.sizes.size()
          << " sizes";
    } else {
      t.strides = contiguous_strides(t.sizes);
    }
    if (accept("+")) {
      if (accept("(")) {
        t.storage_offset = dim("a storage offset");
        expect(")");
      } else {
        t.storage_offset = integer("a storage offset");
      }
    }
    std::optional<DeviceKind> kind = enum_value(device_kind_names(), "device");
    EMBER_CHECK(kind) << where() << ": expected a device but found " << describe(peek());
    t.device = device_index(*kind);
    t.requires_grad = accept("grad");
    return t;
  }

  Typed typed() {
    Typed out;
    out.where = where();
    out.id = value_id();
    expect(":");
    out.type = type();
    return out;
  }

  // ---- inputs

  void input() {
    bool is_const = at("const");
    next();
    std::string at_value = where();
    ValueId id = value_id();
    expect(":");
    TensorType t = type();
    Input in{id, InputKind::Constant, {}};
    // The annotation is the comment on the line where the input ends.
    const Token& end = last();
    auto note = comments_.find(end.line);
    if (is_const) {
      if (note != comments_.end()) in.name = input_name(note->second, 0);
    } else {
      EMBER_CHECK(note != comments_.end())
          << location(end.line, end.col + static_cast<int>(end.text.size()))
          << ": expected '# user', '# param' or '# buffer' after input %" << id;
      in.kind = input_kind(note->second, in.name);
    }
    if (note != comments_.end()) comments_.erase(note);
    define(id, Def{std::move(t), -1, static_cast<int32_t>(g_.inputs.size()), at_value});
    g_.inputs.push_back(std::move(in));
  }

  /// The kind and name of `# <kind>[ <name>]`.
  InputKind input_kind(const Token& note, std::string& name) {
    std::string_view s = note.text;
    size_t k = 0;
    while (k < s.size() && is_blank(s[k])) ++k;
    size_t stop = k;
    while (stop < s.size() && !is_blank(s[stop])) ++stop;
    std::string_view word = s.substr(k, stop - k);
    std::optional<InputKind> kind;
    for (InputKind c : {InputKind::User, InputKind::Parameter, InputKind::Buffer}) {
      if (word == input_kind_name(c)) kind = c;
    }
    EMBER_CHECK(kind) << location(note.line, note.col + static_cast<int>(k))
                      << ": expected user, param or buffer but found "
                      << (word.empty() ? "end of line" : "'" + std::string(word) + "'");
    name = input_name(note, stop);
    return *kind;
  }

  /// The input name in `note` from byte `k` on: quoted, bare (up to a blank), or none.
  std::string input_name(const Token& note, size_t k) {
    std::string_view s = note.text;
    while (k < s.size() && is_blank(s[k])) ++k;
    std::string name;
    if (k < s.size() && s[k] == '"') {
      size_t len = 0;
      name = decode_string(s.substr(k), note.line, note.col + static_cast<int>(k), len);
      k += len;
    } else {
      size_t stop = k;
      while (stop < s.size() && !is_blank(s[stop])) ++stop;
      name = std::string(s.substr(k, stop - k));
      k = stop;
    }
    while (k < s.size() && is_blank(s[k])) ++k;
    EMBER_CHECK(k == s.size()) << location(note.line, note.col + static_cast<int>(k))
                               << ": expected end of line after the input name but found '"
                               << s.substr(k) << "'";
    return name;
  }

  // ---- nodes

  void node() {
    const int32_t n = static_cast<int32_t>(g_.nodes.size());
    std::vector<Typed> outputs;
    OpInfo op;
    bool has_outputs = true;
    if (peek().kind == TokenKind::Value) {
      outputs.push_back(typed());
    } else if (at("(") || at("[")) {
      op.returns_list = at("[");
      const char* close = op.returns_list ? "]" : ")";
      next();
      while (!accept(close)) {
        if (!outputs.empty()) expect(",");
        outputs.push_back(typed());
      }
    } else {
      has_outputs = false;
    }
    if (has_outputs) expect("=");
    EMBER_CHECK(peek().kind == TokenKind::Name)
        << where() << ": expected " << (has_outputs ? "an op name" : "a node, 'mutate' or 'return'")
        << " but found " << describe(peek());
    op.name = ident("an op name");
    while (accept("::")) op.name += "::" + ident("an op name");
    if (accept(".")) op.overload = ident("an overload name");

    expect("(");
    Node node;
    while (!accept(")")) {
      if (!node.args.empty()) expect(",");
      bool kwarg = peek().kind == TokenKind::Name && at("=", 1);
      op.arg_names.push_back(kwarg ? peek().text : "");
      op.kwarg_only.push_back(kwarg);
      if (kwarg) {
        next();
        expect("=");
      }
      node.args.push_back(argument());
    }
    node.op = g_.intern_op(op);
    // Outputs are defined after the arguments are read: a node cannot read its own outputs.
    for (size_t i = 0; i < outputs.size(); ++i) {
      node.outputs.push_back(outputs[i].id);
      define(outputs[i].id,
             Def{std::move(outputs[i].type), n, static_cast<int32_t>(i), outputs[i].where});
    }
    g_.nodes.push_back(std::move(node));
  }

  bool at_number() const {
    const Token& t = peek();
    return t.is_number() || at("inf") || at("nan") || at("-");
  }

  /// An int (Int token) or a double (Float token, inf, nan), with an optional '-'.
  Arg number() {
    bool negative = accept("-");
    const Token& t = peek();
    if (t.kind == TokenKind::Int) return integer("a number", negative);
    EMBER_CHECK(t.kind == TokenKind::Float || at("inf") || at("nan"))
        << where() << ": expected a number but found " << describe(t);
    std::string text = (negative ? "-" : "") + t.text;
    double v = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), v);
    EMBER_CHECK(r.ec == std::errc() && r.ptr == text.data() + text.size())
        << where() << ": float " << text << " is out of range";
    next();
    return v;
  }

  /// An item of a list argument (a scalar or a value), or nullopt when the token starts none.
  std::optional<Arg> item() {
    if (accept("None")) return Arg{NoneArg{}};
    if (accept("True")) return Arg{true};
    if (accept("False")) return Arg{false};
    // The printer never starts an expression with a number (the constant term comes last).
    if (at_symbolic()) return int_arg(dim("an integer"));
    if (at_number()) return number();
    if (peek().kind == TokenKind::Value) return Arg{ValueRef{use_value()}};
    return std::nullopt;
  }

  Arg argument() {
    if (std::optional<Arg> a = item()) {
      // A bare None is NoneArg; None inside a list is a missing Tensor?[] item.
      return *a;
    }
    if (peek().kind == TokenKind::String) return next().bytes;
    if (accept("[")) return list();
    if (auto d = enum_value(dtype_names(), "dtype")) return *d;
    if (auto k = enum_value(device_kind_names(), "device")) return device_index(*k);
    if (auto l = enum_value(layout_names(), "layout")) return *l;
    if (auto m = enum_value(memory_format_names(), "memory_format")) return *m;
    EMBER_CHECK(false) << where() << ": expected an argument but found " << describe(peek());
    return NoneArg{};
  }

  /// The kind of list an item belongs in: 0 int, 1 float, 2 bool, 3 values (None included).
  static int list_kind(const Arg& a) {
    if (std::holds_alternative<int64_t>(a) || std::holds_alternative<DimExpr>(a)) return 0;
    if (std::holds_alternative<double>(a)) return 1;
    if (std::holds_alternative<bool>(a)) return 2;
    return 3;
  }

  /// A list argument, after its '['; its items decide its type (an empty list is an int list).
  Arg list() {
    std::vector<Arg> items;
    while (!accept("]")) {
      if (!items.empty()) expect(",");
      std::string at_item = where();
      std::optional<Arg> a = item();
      EMBER_CHECK(a) << at_item << ": expected a list item (None, True, False, a number or %N) "
                     << "but found " << describe(peek());
      static const char* const kKinds[] = {"an int", "a float", "True or False", "%N or None"};
      EMBER_CHECK(items.empty() || list_kind(*a) == list_kind(items[0]))
          << at_item << ": expected " << kKinds[list_kind(items[0])]
          << " like the list's first item but found " << print_arg(*a);
      items.push_back(std::move(*a));
    }
    if (items.empty()) return std::vector<int64_t>{};
    switch (list_kind(items[0])) {
      case 0: {
        Dims dims;
        for (const Arg& a : items) dims.push_back(*dim_arg(a));
        return int_list_arg(dims);
      }
      case 1:
        return collect<double>(items);
      case 2:
        return collect<bool>(items);
      default:
        break;
    }
    ValueList values;
    for (const Arg& a : items) {
      if (const auto* r = std::get_if<ValueRef>(&a)) {
        values.items.push_back(r->id);
      } else {
        values.items.push_back(std::nullopt);
        values.optional_items = true;
      }
    }
    return values;
  }

  template <typename T>
  static std::vector<T> collect(const std::vector<Arg>& items) {
    std::vector<T> out;
    for (const Arg& a : items) out.push_back(std::get<T>(a));
    return out;
  }

  // ---- mutations

  void mutation() {
    std::string at_target = where();
    ValueId target = use_value();
    expect("<-");
    std::string at_source = where();
    ValueId source = use_value();
    const Def& t = defs_.at(target);
    const Def& s = defs_.at(source);
    EMBER_CHECK(t.node < 0) << at_target << ": mutation target %" << target
                            << " is not a graph input";
    EMBER_CHECK(g_.inputs[t.index].kind != InputKind::Constant)
        << at_target << ": mutation target %" << target << " is a constant";
    EMBER_CHECK(t.type.dtype == s.type.dtype)
        << at_source << ": mutation writes " << dtype_name(s.type.dtype) << " %" << source
        << " into " << dtype_name(t.type.dtype) << " %" << target;
    // (A symbol pinned to a constant stays in the input's type: compared as the constant.)
    EMBER_CHECK(fold_pinned(t.type.sizes, g_.symbols) == fold_pinned(s.type.sizes, g_.symbols))
        << at_source << ": mutation writes %" << source << " of sizes " << sizes_str(s.type.sizes)
        << " into %" << target << " of sizes " << sizes_str(t.type.sizes);
    g_.mutations.push_back(Mutation{target, source});
  }

  std::map<int, Token> comments_;  ///< by line; an input's annotation is taken out when read
  std::map<ValueId, Def> defs_;
  Graph g_;
};

}  // namespace

Graph parse_graph(std::string_view text) {
  return Parser(text).graph();
}

}  // namespace ember::graph
