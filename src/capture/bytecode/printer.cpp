#include "capture/bytecode/printer.h"

#include <cstdio>

#include "capture/bytecode/opcode_table.h"
#include "capture/bytecode/py_ref.h"

namespace ember::capture::bytecode {
namespace {

enum class ArgKind { kNone, kName, kConst, kLocal, kCompare, kBinary };

ArgKind arg_kind(Op op) {
  switch (op) {
    case Op::LOAD_GLOBAL:
    case Op::STORE_GLOBAL:
    case Op::DELETE_GLOBAL:
    case Op::LOAD_NAME:
    case Op::STORE_NAME:
    case Op::DELETE_NAME:
    case Op::LOAD_ATTR:
    case Op::LOAD_METHOD:
    case Op::STORE_ATTR:
    case Op::DELETE_ATTR:
    case Op::IMPORT_NAME:
    case Op::IMPORT_FROM:
    case Op::LOAD_SUPER_ATTR:
    case Op::LOAD_FROM_DICT_OR_GLOBALS:
      return ArgKind::kName;
    case Op::LOAD_CONST:
    case Op::RETURN_CONST:
    case Op::KW_NAMES:
      return ArgKind::kConst;
    case Op::LOAD_FAST:
    case Op::LOAD_FAST_CHECK:
    case Op::LOAD_FAST_AND_CLEAR:
    case Op::STORE_FAST:
    case Op::DELETE_FAST:
    case Op::LOAD_DEREF:
    case Op::STORE_DEREF:
    case Op::DELETE_DEREF:
    case Op::LOAD_CLOSURE:
    case Op::MAKE_CELL:
    case Op::LOAD_CLASSDEREF:
    case Op::LOAD_FROM_DICT_OR_DEREF:
      return ArgKind::kLocal;
    case Op::COMPARE_OP:
      return ArgKind::kCompare;
    case Op::BINARY_OP:
      return ArgKind::kBinary;
    default:
      return ArgKind::kNone;
  }
}

std::string repr(PyObject* o) {
  if (PyCode_Check(o)) {
    PyRef name = PyRef::borrow(reinterpret_cast<PyCodeObject*>(o)->co_name);
    const char* s = PyUnicode_AsUTF8(name.get());
    return std::string("<code ") + (s ? s : "?") + ">";
  }
  PyRef r(PyObject_Repr(o));
  const char* s = r ? PyUnicode_AsUTF8(r.get()) : nullptr;
  if (s == nullptr) {
    fetch_python_error();
    return "?";
  }
  std::string out = s;
  if (out.size() > 60) out = out.substr(0, 57) + "...";
  return out;
}

std::string tuple_item(PyObject* tuple, int i, bool as_repr) {
  if (tuple == nullptr || !PyTuple_Check(tuple) || i < 0 || i >= PyTuple_GET_SIZE(tuple)) {
    return "?";
  }
  PyObject* item = PyTuple_GET_ITEM(tuple, i);
  if (!as_repr && PyUnicode_Check(item)) {
    const char* s = PyUnicode_AsUTF8(item);
    return s ? s : "?";
  }
  return repr(item);
}

std::string argval(const Instr& in, PyCodeObject* co) {
  const OpcodeTable& t = opcode_table();
  switch (arg_kind(in.op)) {
    case ArgKind::kName:
      return tuple_item(co->co_names, in.arg, false);
    case ArgKind::kConst:
      return tuple_item(co->co_consts, in.arg, true);
    case ArgKind::kLocal:
      return tuple_item(co->co_localsplusnames, in.arg, false);
    case ArgKind::kCompare:
      return in.arg >= 0 && static_cast<size_t>(in.arg) < t.cmp_ops.size() ? t.cmp_ops[in.arg]
                                                                           : "?";
    case ArgKind::kBinary:
      return in.arg >= 0 && static_cast<size_t>(in.arg) < t.nb_ops.size() ? t.nb_ops[in.arg] : "?";
    case ArgKind::kNone:
      break;
  }
  return "";
}

}  // namespace

std::string print(const Code& code, PyCodeObject* co) {
  std::string out;
  char buf[64];
  for (size_t i = 0; i < code.instrs.size(); ++i) {
    const Instr& in = code.instrs[i];
    std::snprintf(buf, sizeof buf, "%4zu ", i);
    std::string line = buf;
    line += op_name(in.op);
    if (op_has_arg(in.op) && !op_is_jump(in.op)) {
      line += " " + std::to_string(in.arg);
      if (co != nullptr) {
        std::string v = argval(in, co);
        if (!v.empty()) line += " (" + v + ")";
      }
    }
    if (in.flags != 0) line += " flags=" + std::to_string(in.flags);
    if (in.kwnames >= 0) {
      line += " kw=";
      line += co != nullptr ? tuple_item(co->co_consts, in.kwnames, true)
                            : "#" + std::to_string(in.kwnames);
    }
    if (in.target >= 0) line += " -> " + std::to_string(in.target);
    if (in.handler >= 0) line += " exc=" + std::to_string(in.handler);
    if (line.size() < 56) line.resize(56, ' ');
    line += "  line ";
    line += in.pos.line >= 0 ? std::to_string(in.pos.line) : "-";
    out += line + "\n";
  }
  for (size_t h = 0; h < code.handlers.size(); ++h) {
    const Handler& hd = code.handlers[h];
    out += "handler " + std::to_string(h) + ": -> " + std::to_string(hd.target) + " depth " +
           std::to_string(hd.depth) + (hd.lasti ? " lasti" : "") + "\n";
  }
  return out;
}

}  // namespace ember::capture::bytecode
