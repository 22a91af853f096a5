#include "graph/printer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <type_traits>

namespace ember::graph {
namespace {

/// Python's repr of a float: the shortest digits that round-trip, in fixed notation when the
/// decimal exponent is in [-4, 16), otherwise scientific with a signed, at least two-digit
/// exponent.
std::string double_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string sign = std::signbit(v) ? "-" : "";
  // Shortest round-trip scientific form of |v|, e.g. "1.25e+02" or "5e-01".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exp = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  if (digits == "0") exp = 0;

  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0.";
      out.append(static_cast<size_t>(-exp - 1), '0').append(digits);
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa.append(".").append(digits, 1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mantissa + exp_buf;
}

/// A double-quoted string literal; backslash, quote and control bytes are escaped, other bytes
/// (UTF-8 included) are kept as they are.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\x%02x", u);
          out += hex;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

/// An input name as written after `#`: verbatim, or quoted when it could be misread (empty never
/// reaches here).
std::string name_text(const std::string& name) {
  for (char c : name) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '"' || c == '\\') return quote(name);
  }
  return name;
}

template <typename T, typename F>
std::string list_str(const std::vector<T>& items, F&& item_str) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) s += ", ";
    s += item_str(items[i]);
  }
  return s + "]";
}

std::string value_str(ValueId id) {
  std::string s = "%";
  return s += std::to_string(id);
}

/// `%N : <type>`; a dangling id prints `<undefined>` so that broken graphs still print.
std::string typed_value_str(const Graph& g, ValueId id) {
  bool known = id >= 0 && static_cast<size_t>(id) < g.values.size();
  return value_str(id) + " : " + (known ? type_str(g.values[id].type) : "<undefined>");
}

std::string outputs_str(const Graph& g, const Node& n, bool returns_list) {
  if (!returns_list && n.outputs.size() == 1) return typed_value_str(g, n.outputs[0]);
  std::string s = returns_list ? "[" : "(";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (i) s += ", ";
    s += typed_value_str(g, n.outputs[i]);
  }
  return s + (returns_list ? "]" : ")");
}

std::string node_str(const Graph& g, const Node& n) {
  const OpInfo* op = n.op >= 0 && static_cast<size_t>(n.op) < g.ops.size() ? &g.ops[n.op] : nullptr;
  std::string call;
  if (op) {
    call = op->qualified_name();
  } else {
    call.append("<op ").append(std::to_string(n.op)).append(">");
  }
  call += "(";
  for (size_t i = 0; i < n.args.size(); ++i) {
    if (i) call += ", ";
    bool kwarg = op && i < op->kwarg_only.size() && i < op->arg_names.size() && op->kwarg_only[i];
    if (kwarg) call += op->arg_names[i] + "=";
    call += print_arg(n.args[i]);
  }
  call += ")";
  bool returns_list = op && op->returns_list;
  if (n.outputs.empty() && !returns_list) return call;
  return outputs_str(g, n, returns_list) + " = " + call;
}

std::string input_str(const Graph& g, const Input& in) {
  bool is_const = in.kind == InputKind::Constant;
  std::string s = is_const ? "const " : "input ";
  s += typed_value_str(g, in.value);
  if (is_const) {
    if (!in.name.empty()) s.append("  # ").append(name_text(in.name));
  } else {
    s.append("  # ").append(input_kind_name(in.kind));
    if (!in.name.empty()) s.append(" ").append(name_text(in.name));
  }
  return s;
}

}  // namespace

std::string print_arg(const Arg& a) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, NoneArg>) {
          return "None";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "True" : "False";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return double_repr(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quote(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return list_str(v, [](int64_t x) { return std::to_string(x); });
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          return list_str(v, double_repr);
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          return list_str(v, [](bool x) -> std::string { return x ? "True" : "False"; });
        } else if constexpr (std::is_same_v<T, DType>) {
          return dtype_name(v);
        } else if constexpr (std::is_same_v<T, Device>) {
          return device_name(v);
        } else if constexpr (std::is_same_v<T, Layout>) {
          return layout_name(v);
        } else if constexpr (std::is_same_v<T, MemoryFormat>) {
          return memory_format_name(v);
        } else if constexpr (std::is_same_v<T, ValueRef>) {
          return value_str(v.id);
        } else if constexpr (std::is_same_v<T, DimExpr>) {
          return v.str();
        } else if constexpr (std::is_same_v<T, Dims>) {
          return list_str(v, [](const DimExpr& x) { return x.str(); });
        } else {
          static_assert(std::is_same_v<T, ValueList>, "print_arg misses an Arg alternative");
          return list_str(v.items, [](const std::optional<ValueId>& x) {
            return x ? value_str(*x) : std::string("None");
          });
        }
      },
      a);
}

std::string print_graph(const Graph& g) {
  std::string s = "graph {\n";
  for (const sym::SymbolInfo& info : g.symbols.symbols()) {
    s.append("  symbol ").append(info.name).append(" : ").append(info.range.str());
    s.append(" hint ").append(std::to_string(info.hint));
    if (!info.source.empty()) s.append(" ").append(quote(info.source));
    s += "\n";
  }
  for (const Input& in : g.inputs) s.append("  ").append(input_str(g, in)).append("\n");
  for (const Node& n : g.nodes) s.append("  ").append(node_str(g, n)).append("\n");
  for (const Mutation& m : g.mutations) {
    s.append("  mutate ").append(value_str(m.input)).append(" <- ").append(value_str(m.value));
    s += "\n";
  }
  s += "  return (";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (i) s += ", ";
    s += value_str(g.outputs[i]);
  }
  return s + ")\n}\n";
}

}  // namespace ember::graph
