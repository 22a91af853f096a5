/// \file
/// decode: a code object -> the normalised IR of instruction.h, for the running interpreter.
#pragma once

#include <Python.h>

#include "capture/bytecode/instruction.h"

namespace ember::capture::bytecode {

/// Decodes the deinstrumented bytecode of `co` (PyCode_GetCode) with its location table and
/// exception table into the normalised IR (every normalisation listed in instruction.h). Each
/// Instr gets its position, its code-unit `offset`, its exception handler (deduplicated by
/// target, depth and lasti, numbered in order of first appearance) and, for jumps, its target.
/// Requires: the GIL; `co` from the running interpreter. Throws InternalError on bytecode it does
/// not understand (an unknown opcode, a jump into the middle of an instruction, a malformed table).
Code decode(PyCodeObject* co);

}  // namespace ember::capture::bytecode
