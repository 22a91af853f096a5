/// \file
/// Opcode numbers from the opcode.h ember was compiled against, for the import-time check in
/// opcode_table.cpp. Kept apart because opcode.h defines every opcode name as a macro, which would
/// clash with the `Op` enumerators.
#pragma once

#include <utility>
#include <vector>

namespace ember::capture::bytecode {

/// (name, number) of a few opcodes whose numbers the tables depend on, plus ("HAVE_ARGUMENT", n).
std::vector<std::pair<const char*, int>> compiled_opcode_numbers();

}  // namespace ember::capture::bytecode
