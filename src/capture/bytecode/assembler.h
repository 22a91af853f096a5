/// \file
/// assemble: the normalised bytecode IR -> a new code object for the running interpreter.
#pragma once

#include <Python.h>

#include <optional>
#include <string>

#include "capture/bytecode/instruction.h"

namespace ember::capture::bytecode {

/// Fields of the new code object that differ from the base code object. Python objects are
/// borrowed; null / nullopt keeps the base's value. When `varnames` is given, co_nlocals follows
/// its length. Instruction args must agree with the final tables (ember does not re-index).
struct AssembleOptions {
  PyObject* consts = nullptr;    ///< co_consts (tuple)
  PyObject* names = nullptr;     ///< co_names (tuple of str)
  PyObject* varnames = nullptr;  ///< co_varnames (tuple of str)
  PyObject* cellvars = nullptr;  ///< co_cellvars (tuple of str)
  PyObject* freevars = nullptr;  ///< co_freevars (tuple of str)
  std::optional<int> argcount;
  std::optional<int> posonlyargcount;
  std::optional<int> kwonlyargcount;
  std::optional<int> flags;        ///< co_flags
  std::optional<int> firstlineno;  ///< co_firstlineno (the line table is encoded relative to it)
  std::optional<std::string> name;
  std::optional<std::string> qualname;
};

/// Writes `code` as a code object for the running interpreter, the rest taken from `base` with
/// `opts` applied (code.replace). Undoes the decoder's normalisations: re-inserts PRECALL (3.11)
/// and KW_NAMES (3.11, 3.12) before a CALL with kwnames, packs flags back into opargs, picks jump
/// directions (forward iff the target comes after the jump), re-fuses split 3.13 super-
/// instructions that share an offset. Then lays out the code (EXTENDED_ARG to a fixpoint, zeroed
/// CACHE units), encodes the location table and the exception table the way CPython's assembler
/// does, and computes co_stacksize over fall-through, jump and exception edges
/// (PyCompile_OpcodeStackEffectWithJump). For an unchanged decode of `base` the result has
/// byte-identical co_code, co_linetable, co_exceptiontable and the same co_stacksize.
/// Requires: the GIL; code.minor is the running minor; targets and handlers in range.
/// Returns a new reference. Throws InternalError for IR the running version cannot encode (an op
/// it lacks, a backward conditional jump on 3.12+, inconsistent stack depths) and UserError when
/// code.replace rejects the options.
PyObject* assemble(const Code& code, PyCodeObject* base, const AssembleOptions& opts = {});

}  // namespace ember::capture::bytecode
