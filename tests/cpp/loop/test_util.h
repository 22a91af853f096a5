// Helpers shared by the loop IR tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace ember::loop::testing {

/// The text of tests/cpp/loop/golden/<name>.
inline std::string read_golden(const std::string& name) {
  std::ifstream in(std::string(EMBER_LOOP_GOLDEN_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ember::loop::testing
