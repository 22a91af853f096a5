/// \file
/// The interpreter's operator handlers (op_table.cpp): binary and unary operators, comparisons,
/// `is` and `in`. Operators run for real on plain values only (tensors included: a tensor
/// operator is recorded by the trace); on other objects they are unsupported.
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

namespace {

// BINARY_OP's oparg (CPython's NB_* values, the same on 3.11-3.13; opcode.h is not included
// because its opcode macros clash with Op's names).
enum BinaryOp {
  NB_ADD,
  NB_AND,
  NB_FLOOR_DIVIDE,
  NB_LSHIFT,
  NB_MATRIX_MULTIPLY,
  NB_MULTIPLY,
  NB_REMAINDER,
  NB_OR,
  NB_POWER,
  NB_RSHIFT,
  NB_SUBTRACT,
  NB_TRUE_DIVIDE,
  NB_XOR,
  NB_INPLACE_ADD,
  NB_INPLACE_AND,
  NB_INPLACE_FLOOR_DIVIDE,
  NB_INPLACE_LSHIFT,
  NB_INPLACE_MATRIX_MULTIPLY,
  NB_INPLACE_MULTIPLY,
  NB_INPLACE_REMAINDER,
  NB_INPLACE_OR,
  NB_INPLACE_POWER,
  NB_INPLACE_RSHIFT,
  NB_INPLACE_SUBTRACT,
  NB_INPLACE_TRUE_DIVIDE,
  NB_INPLACE_XOR
};

PyObject* binary_op(int op, PyObject* a, PyObject* b) {
  switch (op) {
    case NB_ADD:
      return PyNumber_Add(a, b);
    case NB_AND:
      return PyNumber_And(a, b);
    case NB_FLOOR_DIVIDE:
      return PyNumber_FloorDivide(a, b);
    case NB_LSHIFT:
      return PyNumber_Lshift(a, b);
    case NB_MATRIX_MULTIPLY:
      return PyNumber_MatrixMultiply(a, b);
    case NB_MULTIPLY:
      return PyNumber_Multiply(a, b);
    case NB_REMAINDER:
      return PyNumber_Remainder(a, b);
    case NB_OR:
      return PyNumber_Or(a, b);
    case NB_POWER:
      return PyNumber_Power(a, b, Py_None);
    case NB_RSHIFT:
      return PyNumber_Rshift(a, b);
    case NB_SUBTRACT:
      return PyNumber_Subtract(a, b);
    case NB_TRUE_DIVIDE:
      return PyNumber_TrueDivide(a, b);
    case NB_XOR:
      return PyNumber_Xor(a, b);
    case NB_INPLACE_ADD:
      return PyNumber_InPlaceAdd(a, b);
    case NB_INPLACE_AND:
      return PyNumber_InPlaceAnd(a, b);
    case NB_INPLACE_FLOOR_DIVIDE:
      return PyNumber_InPlaceFloorDivide(a, b);
    case NB_INPLACE_LSHIFT:
      return PyNumber_InPlaceLshift(a, b);
    case NB_INPLACE_MATRIX_MULTIPLY:
      return PyNumber_InPlaceMatrixMultiply(a, b);
    case NB_INPLACE_MULTIPLY:
      return PyNumber_InPlaceMultiply(a, b);
    case NB_INPLACE_REMAINDER:
      return PyNumber_InPlaceRemainder(a, b);
    case NB_INPLACE_OR:
      return PyNumber_InPlaceOr(a, b);
    case NB_INPLACE_POWER:
      return PyNumber_InPlacePower(a, b, Py_None);
    case NB_INPLACE_RSHIFT:
      return PyNumber_InPlaceRshift(a, b);
    case NB_INPLACE_SUBTRACT:
      return PyNumber_InPlaceSubtract(a, b);
    case NB_INPLACE_TRUE_DIVIDE:
      return PyNumber_InPlaceTrueDivide(a, b);
    case NB_INPLACE_XOR:
      return PyNumber_InPlaceXor(a, b);
    default:
      break;
  }
  EMBER_UNSUPPORTED(false) << "binary operator " << op;
  return nullptr;
}

}  // namespace

void Interpreter::op_BINARY_OP(Frame& fr, const Instr& in, StepResult&) {
  nb::object b = pop(fr);
  nb::object a = pop(fr);
  EMBER_UNSUPPORTED(is_plain_value(a) && is_plain_value(b))
      << "operator on a " << type_name_of(a) << " and a " << type_name_of(b) << " at "
      << location();
  bool inplace = in.arg >= NB_INPLACE_ADD;
  const bool outside = inplace && PyList_CheckExact(a.ptr()) && mutates_outside(a);
  EMBER_UNSUPPORTED(!inplace || is_tensor(a) || is_fresh(a) || outside ||
                    !PyList_CheckExact(a.ptr()))
      << "an in-place operator on a list from outside the function at " << location();
  auto& st = fr.stack;
  st.push_back(checked(binary_op(in.arg, a.ptr(), b.ptr())));
  PyObject* r = st.back().ptr();
  // A list, dict or set the operator made (`[(0, 0)] * n`, `a + b`, `d | e`) is the
  // frame's own, as is one it extended in place.
  bool container = PyList_CheckExact(r) || PyDict_CheckExact(r) || PySet_CheckExact(r);
  if (container && (inplace ? !outside : (r != a.ptr() && r != b.ptr()))) fresh(st.back());
}

void Interpreter::op_unary(Frame& fr, const Instr& in, StepResult&) {
  nb::object a = pop(fr);
  if (in.op == Op::UNARY_NOT) {
    fr.stack.push_back(nb::borrow(truth(a) ? Py_False : Py_True));
    return;
  }
  EMBER_UNSUPPORTED(is_plain_value(a))
      << "operator on a " << type_name_of(a) << " at " << location();
  PyObject* r = in.op == Op::UNARY_NEGATIVE ? PyNumber_Negative(a.ptr())
                : in.op == Op::UNARY_INVERT ? PyNumber_Invert(a.ptr())
                                            : PyNumber_Positive(a.ptr());
  fr.stack.push_back(checked(r));
}

void Interpreter::op_CALL_INTRINSIC_1(Frame& fr, const Instr& in, StepResult&) {
  nb::object a = pop(fr);
  if (in.arg == 5) {  // INTRINSIC_UNARY_POSITIVE
    EMBER_UNSUPPORTED(is_plain_value(a)) << "operator on a " << type_name_of(a);
    fr.stack.push_back(checked(PyNumber_Positive(a.ptr())));
  } else if (in.arg == 6) {  // INTRINSIC_LIST_TO_TUPLE
    fr.stack.push_back(checked(PyList_AsTuple(a.ptr())));
  } else {
    EMBER_UNSUPPORTED(false) << "CALL_INTRINSIC_1 " << in.arg << " at " << location();
  }
}

void Interpreter::op_COMPARE_OP(Frame& fr, const Instr& in, StepResult&) {
  nb::object b = pop(fr);
  nb::object a = pop(fr);
  EMBER_UNSUPPORTED(is_plain_value(a) && is_plain_value(b))
      << "comparing a " << type_name_of(a) << " and a " << type_name_of(b) << " at " << location();
  nb::object r = checked(PyObject_RichCompare(a.ptr(), b.ptr(), in.arg));
#if PY_MINOR_VERSION >= 13
  if (in.flags & 0x10) r = nb::borrow(truth(r) ? Py_True : Py_False);
#endif
  fr.stack.push_back(std::move(r));
}

void Interpreter::op_IS_OP(Frame& fr, const Instr& in, StepResult&) {
  nb::object b = pop(fr);
  nb::object a = pop(fr);
  if (!is_guardable_constant(a.ptr()) && !is_guardable_constant(b.ptr())) {
    pin_identity(a);
    pin_identity(b);
  }
  bool same = (a.ptr() == b.ptr()) != (in.arg != 0);
  fr.stack.push_back(nb::borrow(same ? Py_True : Py_False));
}

void Interpreter::op_CONTAINS_OP(Frame& fr, const Instr& in, StepResult&) {
  nb::object container = pop(fr);
  nb::object item = pop(fr);
  pin_identity(item);
  if (nb::object m = special_method(container, "__contains__"); m.is_valid()) {
    fr.stack.push_back(
        nb::borrow(truth(call(m, {item}, {})) != (in.arg != 0) ? Py_True : Py_False));
    return;
  }
  EMBER_UNSUPPORTED(
      (is_plain_value(container) && !is_tensor(container)) ||
      (PyDict_Check(container.ptr()) && Py_TYPE(container.ptr())->tp_as_sequence->sq_contains ==
                                            PyDict_Type.tp_as_sequence->sq_contains))
      << "'in' on a " << type_name_of(container) << " at " << location();
  int r = PySequence_Contains(container.ptr(), item.ptr());
  if (r < 0) throw nb::python_error();
  fr.stack.push_back(nb::borrow((r == 1) != (in.arg != 0) ? Py_True : Py_False));
}

}  // namespace ember::capture
