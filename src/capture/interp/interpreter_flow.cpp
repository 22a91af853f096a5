/// \file
/// The interpreter's handlers for the stack, jumps, loops, returns and generators (op_table.cpp).
/// A generator function is run to completion when called (inline_function): its yields are
/// collected, and `yield from` drives a fresh iterator with next().
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

void Interpreter::op_POP_TOP(Frame& fr, const Instr&, StepResult&) {
  pop(fr);
}

void Interpreter::op_PUSH_NULL(Frame& fr, const Instr&, StepResult&) {
  fr.stack.emplace_back();
}

void Interpreter::op_COPY(Frame& fr, const Instr& in, StepResult&) {
  fr.stack.push_back(peek(fr, static_cast<size_t>(in.arg)));
}

void Interpreter::op_SWAP(Frame& fr, const Instr& in, StepResult&) {
  std::swap(peek(fr, 1), peek(fr, static_cast<size_t>(in.arg)));
}

void Interpreter::op_RETURN_VALUE(Frame& fr, const Instr&, StepResult& out) {
  out.value = pop(fr);
  out.returned = true;
}

void Interpreter::op_RETURN_CONST(Frame& fr, const Instr& in, StepResult& out) {
  out.value = const_at(fr.code, in.arg);
  out.returned = true;
}

void Interpreter::op_jump(Frame& fr, const Instr& in, StepResult&) {
  fr.pc = static_cast<size_t>(in.target);
}

void Interpreter::op_pop_jump_if_bool(Frame& fr, const Instr& in, StepResult&) {
  nb::object v = pop(fr);
  if (truth(v) == (in.op == Op::POP_JUMP_IF_TRUE)) fr.pc = static_cast<size_t>(in.target);
}

void Interpreter::op_pop_jump_if_none(Frame& fr, const Instr& in, StepResult&) {
  nb::object v = pop(fr);
  if (v.is_none() == (in.op == Op::POP_JUMP_IF_NONE)) fr.pc = static_cast<size_t>(in.target);
}

void Interpreter::op_jump_if_or_pop(Frame& fr, const Instr& in, StepResult&) {
  bool t = truth(peek(fr));
  if (t == (in.op == Op::JUMP_IF_TRUE_OR_POP)) {
    fr.pc = static_cast<size_t>(in.target);
  } else {
    pop(fr);
  }
}

void Interpreter::op_TO_BOOL(Frame& fr, const Instr&, StepResult&) {
  nb::object v = pop(fr);
  fr.stack.push_back(nb::borrow(truth(v) ? Py_True : Py_False));
}

void Interpreter::op_GET_ITER(Frame& fr, const Instr&, StepResult&) {
  nb::object v = materialized(pop(fr));
  EMBER_UNSUPPORTED(is_plain_value(v) || is_fresh(v) || PyIter_Check(v.ptr()))
      << "iterating over a " << type_name_of(v) << " at " << location();
  fr.stack.push_back(fresh(checked(PyObject_GetIter(v.ptr()))));
}

void Interpreter::op_FOR_ITER(Frame& fr, const Instr& in, StepResult&) {
  nb::handle it = peek(fr);
  EMBER_UNSUPPORTED(is_fresh(it)) << "FOR_ITER over an iterator from outside the function";
  PyObject* next = PyIter_Next(it.ptr());
  if (next != nullptr) {
    fr.stack.push_back(nb::steal(next));
    return;
  }
  if (PyErr_Occurred()) throw nb::python_error();
#if PY_MINOR_VERSION == 11
  pop(fr);
#else
  fr.stack.push_back(nb::none());  // END_FOR (3.12) or END_FOR + POP_TOP (3.13) pop both
#endif
  fr.pc = static_cast<size_t>(in.target);
}

void Interpreter::op_END_FOR(Frame& fr, const Instr&, StepResult&) {
#if PY_MINOR_VERSION == 12
  pop(fr);
#endif
  pop(fr);
}

void Interpreter::op_GET_YIELD_FROM_ITER(Frame& fr, const Instr&, StepResult&) {
  // `yield from it` in a generator run to completion (nn.Module.named_modules): the
  // iterator is driven by SEND below, each of its items yielded in turn.
  EMBER_UNSUPPORTED(fr.yields != nullptr) << "yield from in a captured frame at " << location();
  nb::object v = materialized(pop(fr));
  EMBER_UNSUPPORTED(is_plain_value(v) || is_fresh(v))
      << "yield from a " << type_name_of(v) << " at " << location();
  fr.stack.push_back(PyIter_Check(v.ptr()) ? v : fresh(checked(PyObject_GetIter(v.ptr()))));
}

void Interpreter::op_SEND(Frame& fr, const Instr& in, StepResult&) {
  // Only next(): what a generator run to completion sends back to its yield from is None.
  nb::object sent = pop(fr);
  nb::handle receiver = peek(fr);
  EMBER_UNSUPPORTED(sent.is_none() && fr.yields != nullptr && is_fresh(receiver) &&
                    PyIter_Check(receiver.ptr()))
      << "SEND to a " << type_name_of(receiver) << " at " << location();
  PyObject* next = PyIter_Next(receiver.ptr());
  if (next != nullptr) {
    fr.stack.push_back(nb::steal(next));
    return;
  }
  if (PyErr_Occurred()) throw nb::python_error();
#if PY_MINOR_VERSION == 11
  peek(fr) = nb::none();  // the receiver is replaced by its return value (None)
#else
  fr.stack.push_back(nb::none());  // END_SEND pops the receiver below it
#endif
  fr.pc = static_cast<size_t>(in.target);
}

void Interpreter::op_END_SEND(Frame& fr, const Instr&, StepResult&) {
  nb::object value = pop(fr);
  pop(fr);
  fr.stack.push_back(std::move(value));
}

void Interpreter::op_RETURN_GENERATOR(Frame& fr, const Instr&, StepResult&) {
  EMBER_UNSUPPORTED(fr.yields != nullptr) << "a generator frame at " << location();
  fr.stack.push_back(nb::none());
}

void Interpreter::op_YIELD_VALUE(Frame& fr, const Instr&, StepResult&) {
  EMBER_UNSUPPORTED(fr.yields != nullptr) << "yield in a captured frame at " << location();
  fr.yields->push_back(pop(fr));
  fr.stack.push_back(nb::none());  // what send() would give back: next() sends None
}

}  // namespace ember::capture
