#include "capture/bytecode/instruction.h"

namespace ember::capture::bytecode {

std::string_view op_name(Op op) {
  static constexpr std::string_view kNames[] = {
#define EMBER_BYTECODE_OP(name) #name,
#include "capture/bytecode/ops.def"
#undef EMBER_BYTECODE_OP
  };
  return kNames[static_cast<size_t>(op)];
}

}  // namespace ember::capture::bytecode
