/// \file
/// The running interpreter's opcode table: how ember's `Op`s map to CPython opcode numbers, and
/// what each opcode's encoding looks like (oparg, inline CACHE units, relative jump, direction).
///
/// Source of truth: the interpreter itself. `init_opcode_table` reads the `opcode` and `dis`
/// modules (opmap, _inline_cache_entries, hasjrel, hasarg / HAVE_ARGUMENT, _nb_ops) and checks
/// them against the opcode.h the extension was compiled with and against ops.def, so a patch
/// release that renumbers or adds an opcode fails at import instead of miscompiling. Nothing here
/// hard-codes a number that differs between 3.11, 3.12 and 3.13.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "capture/bytecode/instruction.h"

namespace ember::capture::bytecode {

/// Number of `Op`s (the entries of ops.def).
inline constexpr size_t kNumOps = 0
#define EMBER_BYTECODE_OP(name) +1
#include "capture/bytecode/ops.def"
#undef EMBER_BYTECODE_OP
    ;

/// The opcode numbering of one CPython minor version. Plain data; see `opcode_table()`.
struct OpcodeTable {
  int minor = 0;                        ///< CPython 3.<minor>
  std::array<int16_t, kNumOps> native;  ///< Op -> opcode number (>= 256: pseudo op), -1 if absent
  std::array<Op, 256> op;               ///< opcode number -> Op (meaningful where `valid`)
  std::array<bool, 256> valid{};        ///< a real opcode of this version
  std::array<uint8_t, 256> caches{};    ///< inline CACHE units after the instruction
  std::array<bool, 256> has_arg{};      ///< the oparg means something
  std::array<bool, 256> jrel{};         ///< relative jump (dis.hasjrel)
  std::array<bool, 256> backward{};     ///< a relative jump that goes backwards
  int extended_arg = -1;                ///< the EXTENDED_ARG opcode number
  std::array<bool, kNumOps> op_has_arg{};  ///< per Op: see `op_has_arg`
  std::array<bool, kNumOps> op_is_jump{};  ///< per Op: see `op_is_jump`
  std::vector<std::string> nb_ops;         ///< BINARY_OP oparg -> operator symbol ("+", "+=", ...)
  std::vector<std::string> cmp_ops;        ///< COMPARE_OP comparison -> symbol ("<", ...)
};

/// Builds the table of the running interpreter and checks it (see the file comment). Idempotent;
/// called when ember._capture_core is imported. Needs the GIL. Throws InternalError when the
/// interpreter disagrees with what ember was compiled against or knows.
void init_opcode_table();

/// The running interpreter's table; builds it on first use (needs the GIL).
const OpcodeTable& opcode_table();

/// Op by name ("LOAD_FAST"); throws InternalError for an unknown name.
Op op_from_name(std::string_view name);

/// Whether `op` carries an oparg in the normalised IR (its native form takes one, or it is one of
/// the normalised jumps / LOAD_METHOD).
bool op_has_arg(Op op);

/// Whether `op` is a jump in the normalised IR, i.e. `Instr::target` is meaningful.
bool op_is_jump(Op op);

}  // namespace ember::capture::bytecode
