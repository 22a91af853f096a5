#include "capture/bytecode/compiled_opcodes.h"

#include <Python.h>
#include <opcode.h>

namespace ember::capture::bytecode {

std::vector<std::pair<const char*, int>> compiled_opcode_numbers() {
  return {
      {"CACHE", CACHE},
      {"EXTENDED_ARG", EXTENDED_ARG},
      {"HAVE_ARGUMENT", HAVE_ARGUMENT},
      {"LOAD_GLOBAL", LOAD_GLOBAL},
      {"LOAD_ATTR", LOAD_ATTR},
      {"LOAD_FAST", LOAD_FAST},
      {"LOAD_CONST", LOAD_CONST},
      {"CALL", CALL},
      {"RESUME", RESUME},
      {"JUMP_FORWARD", JUMP_FORWARD},
      {"JUMP_BACKWARD", JUMP_BACKWARD},
      {"FOR_ITER", FOR_ITER},
      {"RETURN_VALUE", RETURN_VALUE},
      {"BINARY_OP", BINARY_OP},
      {"COMPARE_OP", COMPARE_OP},
  };
}

}  // namespace ember::capture::bytecode
