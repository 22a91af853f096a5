/// \file
/// Writing the code of a graph break (graph_break.cpp): constants, instructions under
/// exception-table entries, and with blocks entered again around the unsupported instruction and
/// exited before a resume function (Note [Graph breaks inside with blocks],
/// interpreter_exceptions.cpp).
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <string>
#include <vector>

#include "capture/bytecode/instruction.h"

namespace ember::capture {

/// The constants of a code object being written: the base code's, then those added.
struct Consts {
  nanobind::object list;
  explicit Consts(PyObject* base) : list(nanobind::steal(PySequence_List(base))) {}
  int add(nanobind::handle v) {
    Py_ssize_t i = PyList_GET_SIZE(list.ptr());
    PyList_Append(list.ptr(), v.ptr());
    return static_cast<int>(i);
  }
  int add_int(int v) { return add(nanobind::steal(PyLong_FromLong(v))); }
  nanobind::object tuple() const { return nanobind::steal(PyList_AsTuple(list.ptr())); }
};

/// One instruction of `op` at `pos`.
inline bytecode::Instr make(bytecode::Op op, int arg, const bytecode::Position& pos) {
  bytecode::Instr in;
  in.op = op;
  in.arg = arg;
  in.pos = pos;
  return in;
}

/// A with block the break's code enters again (Note [Graph breaks inside with blocks]): the
/// stack position of its __exit__, the local that also holds it, and its two exception-table
/// entries in the transformed code.
struct ReenteredWith {
  int position = 0;
  int exit_local = 0;
  int handler = -1;  ///< H: calls __exit__ with the exception and re-raises
  int cleanup = -1;  ///< C: covers H, restores the handled exception, re-raises
};

/// Appends instructions at `pos` to `out`, each covered by the exception-table entry `protect`
/// (-1: none); returns the index of the one appended.
struct Writer {
  bytecode::Code& out;
  bytecode::Position pos;
  int protect = -1;
  int operator()(bytecode::Op op, int arg = 0) {
    bytecode::Instr in = make(op, arg, pos);
    in.handler = protect;
    out.instrs.push_back(in);
    return static_cast<int>(out.instrs.size()) - 1;
  }
};

/// The names of the locals that keep `n` re-entered with blocks' __exit__s, appended to `names`.
void add_exit_names(std::vector<std::string>& names, size_t n);

/// Adds the entries of `withs` (outermost first) to out.handlers; their targets come with
/// emit_with_handlers.
void add_with_entries(bytecode::Code& out, std::vector<ReenteredWith>& withs);

/// The handler code of `withs`, as CPython's with statement has it, after the last tail:
///   H: PUSH_EXC_INFO; WITH_EXCEPT_START; POP_TOP; RERAISE 2     (covered by C)
///   C: COPY 3; POP_EXCEPT; RERAISE 1                            (covered by the outer H)
/// The managers the break's code enters (grad modes, autocast, nullcontext) never suppress an
/// exception, so H always re-raises.
void emit_with_handlers(bytecode::Code& out, const std::vector<ReenteredWith>& withs,
                        const bytecode::Position& pos);

/// The with blocks whose __exit__s `reenter` marks on a stack (outermost first), at stack
/// positions `base + i`, their __exit__s kept in the locals from `first_local` on; their
/// exception-table entries added to `out`.
std::vector<ReenteredWith> reentered_withs(bytecode::Code& out,
                                           const std::vector<nanobind::object>& reenter, int base,
                                           int first_local);

/// Enters with block `w` again: a new manager from `factory`, its __exit__ left on the stack
/// (and stored in w.exit_local); the instructions from then on are covered by w's entry
/// (emit.protect).
void emit_reenter(Writer& emit, Consts& consts, nanobind::handle factory, const ReenteredWith& w);

/// Exits with block `w` (its __exit__(None, None, None), from its local), covered by the entry
/// of the block around it (`outer`, or none): emit.protect is that from then on.
void emit_exit(Writer& emit, Consts& consts, const ReenteredWith& w, const ReenteredWith* outer);

}  // namespace ember::capture
