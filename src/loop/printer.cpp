#include "loop/printer.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace ember::loop {

std::string print_float(DType t, double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  std::to_chars_result r = t == DType::Float32
                               ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                               : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

namespace {

void print_list(std::ostream& os, const std::vector<Expr>& items);

void print(std::ostream& os, const Expr& e) {
  if (!e.defined()) {
    os << "<undefined>";
    return;
  }
  switch (e.kind()) {
    case ExprKind::IntImm: {
      int64_t v = e.as<IntImm>()->value;
      if (e.dtype() == DType::Bool) {
        os << (v != 0 ? "true" : "false");
      } else if (e.dtype() == kIndexType) {
        os << v;
      } else {
        os << dtype_name(e.dtype()) << "(" << v << ")";
      }
      return;
    }
    case ExprKind::FloatImm:
      os << dtype_name(e.dtype()) << "(" << print_float(e.dtype(), e.as<FloatImm>()->value) << ")";
      return;
    case ExprKind::Var:
      os << e.as<Var>()->name;
      return;
    case ExprKind::SizeVar:
      os << e.as<SizeVar>()->name;
      return;
#define EMBER_LOOP_BINARY(Name, Symbol, Cat)                                  \
  case ExprKind::Name: {                                                      \
    const auto* n = e.as<Name>();                                             \
    if (ExprKind::Name == ExprKind::Min || ExprKind::Name == ExprKind::Max) { \
      os << Symbol << "(";                                                    \
      print(os, n->a);                                                        \
      os << ", ";                                                             \
      print(os, n->b);                                                        \
      os << ")";                                                              \
    } else {                                                                  \
      os << "(";                                                              \
      print(os, n->a);                                                        \
      os << " " << Symbol << " ";                                             \
      print(os, n->b);                                                        \
      os << ")";                                                              \
    }                                                                         \
    return;                                                                   \
  }
#include "loop/nodes.def"
    case ExprKind::Not:
      os << "!";
      print(os, e.as<Not>()->a);
      return;
    case ExprKind::Select: {
      const auto* n = e.as<Select>();
      os << "select";
      print_list(os, {n->cond, n->t, n->f});
      return;
    }
    case ExprKind::Cast:
      os << "cast<" << dtype_name(e.dtype()) << ">(";
      print(os, e.as<Cast>()->value);
      os << ")";
      return;
    case ExprKind::Load:
      os << e.as<Load>()->buffer << "[";
      print(os, e.as<Load>()->index);
      os << "]";
      return;
    case ExprKind::Call:
      os << call_fn_name(e.as<Call>()->fn);
      print_list(os, e.as<Call>()->args);
      return;
  }
}

/// "(a, b, c)".
void print_list(std::ostream& os, const std::vector<Expr>& items) {
  os << "(";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) os << ", ";
    print(os, items[i]);
  }
  os << ")";
}

void print_names(std::ostream& os, const std::vector<std::string>& names) {
  if (names.size() == 1) {
    os << names[0];
    return;
  }
  os << "(";
  for (size_t i = 0; i < names.size(); ++i) os << (i > 0 ? ", " : "") << names[i];
  os << ")";
}

void print_dims(std::ostream& os, const std::vector<Expr>& dims) {
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) os << ", ";
    print(os, dims[i]);
  }
  os << "]";
}

void print(std::ostream& os, const Stmt& s, int indent);

/// " {\n" body "<indent>}".
void print_body(std::ostream& os, const Stmt& body, int indent) {
  os << " {\n";
  print(os, body, indent + 2);
  os << std::string(indent, ' ') << "}";
}

void print(std::ostream& os, const Stmt& s, int indent) {
  std::string pad(indent, ' ');
  if (!s.defined()) {
    os << pad << "<undefined>\n";
    return;
  }
  switch (s.kind()) {
    case StmtKind::For: {
      const auto* n = s.as<For>();
      os << pad << "for (";
      print(os, n->var);
      os << ", ";
      print(os, n->min);
      os << ", ";
      print(os, n->extent);
      os << ")";
      if (n->for_kind != ForKind::Serial) os << " " << for_kind_name(n->for_kind);
      if (n->parallel_when.defined()) {
        os << " if ";
        print(os, n->parallel_when);
      }
      print_body(os, n->body, indent);
      os << "\n";
      return;
    }
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) print(os, c, indent);
      return;
    case StmtKind::Store: {
      const auto* n = s.as<Store>();
      os << pad << n->buffer << "[";
      print(os, n->index);
      os << "] = ";
      print(os, n->value);
      os << "\n";
      return;
    }
    case StmtKind::Accumulate: {
      const auto* n = s.as<Accumulate>();
      os << pad << "accumulate " << reduce_op_name(n->op) << " ";
      print_names(os, n->buffers);
      os << "[";
      print(os, n->index);
      os << "] <- ";
      if (n->values.size() == 1) {
        print(os, n->values[0]);
      } else {
        print_list(os, n->values);
      }
      os << "\n";
      return;
    }
    case StmtKind::Let: {
      const auto* n = s.as<Let>();
      os << pad << "let ";
      print(os, n->var);
      os << " = ";
      print(os, n->value);
      print_body(os, n->body, indent);
      os << "\n";
      return;
    }
    case StmtKind::IfThenElse: {
      const auto* n = s.as<IfThenElse>();
      os << pad << "if ";
      print(os, n->cond);
      print_body(os, n->then_case, indent);
      if (n->else_case.defined()) {
        os << " else";
        print_body(os, n->else_case, indent);
      }
      os << "\n";
      return;
    }
    case StmtKind::Allocate: {
      const auto* n = s.as<Allocate>();
      os << pad << "alloc " << n->buffer << " : " << dtype_name(n->dtype);
      print_dims(os, n->sizes);
      print_body(os, n->body, indent);
      os << "\n";
      return;
    }
  }
}

}  // namespace

std::string print_expr(const Expr& e) {
  // The simplifier keys terms by their text, so this runs very often: one stream per thread,
  // reused (a stream's construction, its locale's above all, costs more than most prints).
  thread_local std::ostringstream os;
  thread_local bool busy = false;
  if (busy) {  // (not reentered today; a fresh stream if it ever is)
    std::ostringstream fresh;
    print(fresh, e);
    return fresh.str();
  }
  struct Busy {  // cleared however print leaves
    bool& flag;
    explicit Busy(bool& f) : flag(f) { flag = true; }
    ~Busy() { flag = false; }
  } in_use(busy);
  os.str(std::string());
  os.clear();
  print(os, e);
  return os.str();
}

std::string print_stmt(const Stmt& s, int indent) {
  std::ostringstream os;
  print(os, s, indent);
  return os.str();
}

std::string print_kernel(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << "(";
  for (size_t i = 0; i < k.size_vars.size(); ++i) os << (i > 0 ? ", " : "") << k.size_vars[i];
  os << (k.combo ? ") combo {\n" : ") {\n");
  for (const BufferParam& b : k.buffers) {
    os << "  " << buffer_role_name(b.role) << " " << b.name << " : " << dtype_name(b.dtype);
    print_dims(os, b.sizes);
    os << " strides ";
    print_dims(os, b.strides);
    os << "\n";
  }
  print(os, k.body, 2);
  os << "}\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Expr& e) {
  print(os, e);
  return os;
}

std::ostream& operator<<(std::ostream& os, const Stmt& s) {
  print(os, s, 0);
  return os;
}

}  // namespace ember::loop
