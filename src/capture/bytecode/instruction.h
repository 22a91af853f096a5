/// \file
/// The normalised bytecode IR: a code object's instructions as plain data, the same shape on
/// CPython 3.11, 3.12 and 3.13. `decode` (decoder.h) builds it from a code object; `assemble`
/// (assembler.h) writes a code object from it; `print` (printer.h) shows it.
///
/// Normalisation (done by the decoder, undone by the assembler for the running version):
///  - EXTENDED_ARG is folded into `arg`; CACHE units are dropped.
///  - Jumps carry `target` (an instruction index), never an offset. Direction-specific 3.11
///    opcodes become one op: POP_JUMP_{FORWARD,BACKWARD}_IF_X -> POP_JUMP_IF_X; JUMP_FORWARD and
///    JUMP_BACKWARD -> JUMP; JUMP_BACKWARD_NO_INTERRUPT -> JUMP_NO_INTERRUPT (CPython's own pseudo
///    op: JUMP_FORWARD or JUMP_BACKWARD_NO_INTERRUPT). The assembler picks the direction from the
///    layout: forward when the target comes after the jump. `arg` of a jump is 0.
///    A jump to a folded KW_NAMES/PRECALL targets the CALL it was folded into.
///  - Packed flag bits leave `arg` for `flags`: LOAD_GLOBAL (bit 0: push NULL), 3.12+ LOAD_ATTR
///    (bit 0: method load; a method load becomes LOAD_METHOD, whose flags are 0 on every version),
///    COMPARE_OP (3.11: none; 3.12: low 4 bits,
///    3.13: low 5 bits; `arg` is then the comparison, Py_LT..Py_GE), LOAD_SUPER_ATTR (low 2 bits).
///  - Calls: 3.11's PRECALL is dropped and KW_NAMES (3.11, 3.12) is folded into the CALL that
///    follows it (`kwnames` = its co_consts index, `kwnames_pos` = its position). 3.13's CALL_KW
///    stays an op of its own (its names tuple is on the stack).
///  - 3.13's super-instructions (LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST, STORE_FAST_STORE_FAST)
///    are split into their halves. Both halves keep the pair's `offset`; the assembler fuses two
///    adjacent instructions again only when they share an offset (>= 0) and still qualify.
/// Everything else keeps CPython's opcode name and oparg. Local, cell and free-variable opargs
/// are localsplus indices (as CPython stores them on 3.11+).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ember::capture::bytecode {

/// Every opcode name of CPython 3.11-3.13, plus the normalised ones above (ops.def).
enum class Op : uint16_t {
#define EMBER_BYTECODE_OP(name) name,
#include "capture/bytecode/ops.def"
#undef EMBER_BYTECODE_OP
};

std::string_view op_name(Op op);

/// A source position; -1 where unknown.
struct Position {
  int32_t line = -1;
  int32_t end_line = -1;
  int32_t col = -1;
  int32_t end_col = -1;
};

struct Instr {
  Op op = Op::NOP;
  int32_t arg = 0;       ///< the oparg, normalised (see the file comment); 0 for ops without one
  uint8_t flags = 0;     ///< flag bits the version packs into the oparg (see the file comment)
  int32_t kwnames = -1;  ///< CALL: co_consts index of the keyword-name tuple, or -1
  int32_t target = -1;   ///< jumps, FOR_ITER, SEND, ...: index of the target instruction
  int32_t handler = -1;  ///< index into Code::handlers of the entry covering it, or -1
  int32_t offset = -1;   ///< code-unit offset in the decoded code (of its first EXTENDED_ARG,
                         ///< where jumps land); -1 for a new instruction
  Position pos;
  Position kwnames_pos;  ///< CALL with kwnames on 3.11/3.12: the position of its KW_NAMES
                         ///< (line -1: use `pos`)
};

/// One exception-table entry, shared by the instructions it covers (Instr::handler).
struct Handler {
  int32_t target = -1;  ///< instruction index of the handler
  int32_t depth = 0;    ///< stack depth the handler starts from
  bool lasti = false;   ///< whether the raising offset is pushed too
};

struct Code {
  int minor = 0;  ///< CPython 3.<minor> the code is for
  std::vector<Instr> instrs;
  std::vector<Handler> handlers;
};

}  // namespace ember::capture::bytecode
