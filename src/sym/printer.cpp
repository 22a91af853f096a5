#include "sym/printer.h"

namespace ember::sym {
namespace {

/// An operand of `//` or `%` as Python reads it: a sum on the left, and anything but a
/// nonnegative constant or a lone atom on the right, go in parentheses.
std::string operand(const SymExpr& e, bool right) {
  const ExprNode& n = e.node();
  bool bare = right ? (n.terms.empty() && n.constant >= 0) ||
                          (n.constant == 0 && n.terms.size() == 1 && n.terms[0].coeff == 1 &&
                           n.terms[0].factors.size() == 1 && n.terms[0].factors[0].power == 1)
                    : n.terms.size() + (n.constant != 0 ? 1 : 0) <= 1;
  return bare ? print(e) : "(" + print(e) + ")";
}

std::string print_atom(const AtomNode& a) {
  switch (a.kind) {
    case AtomKind::Symbol:
      return a.name;
    case AtomKind::FloorDiv:
      return "(" + operand(a.lhs, false) + " // " + operand(a.rhs, true) + ")";
    case AtomKind::Mod:
      return "(" + operand(a.lhs, false) + " % " + operand(a.rhs, true) + ")";
    case AtomKind::Min:
      return "min(" + print(a.lhs) + ", " + print(a.rhs) + ")";
    case AtomKind::Max:
      return "max(" + print(a.lhs) + ", " + print(a.rhs) + ")";
  }
  return "?";
}

/// Appends `magnitude_text` with its sign: a leading "-" first, " + " or " - " after.
void append_signed(std::string& out, bool negative, const std::string& magnitude_text) {
  if (out.empty()) {
    out = negative ? "-" + magnitude_text : magnitude_text;
  } else {
    out += (negative ? " - " : " + ") + magnitude_text;
  }
}

}  // namespace

std::string print(const SymExpr& e) {
  const ExprNode& n = e.node();
  if (n.terms.empty()) return std::to_string(n.constant);
  std::string out;
  for (const Term& t : n.terms) {
    std::string text;
    for (const Factor& f : t.factors) {
      std::string atom = print_atom(*f.atom);
      for (int64_t i = 0; i < f.power; ++i) text += (text.empty() ? "" : "*") + atom;
    }
    // Coefficients are never INT64_MIN (expr.h), so negation is safe.
    int64_t magnitude = t.coeff < 0 ? -t.coeff : t.coeff;
    if (magnitude != 1) text += "*" + std::to_string(magnitude);
    append_signed(out, t.coeff < 0, text);
  }
  if (n.constant != 0) {
    append_signed(out, n.constant < 0, std::to_string(n.constant < 0 ? -n.constant : n.constant));
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const SymExpr& e) {
  return os << print(e);
}

}  // namespace ember::sym
