#include "codegen/cpp/cpp_emitter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "codegen/cpp/cpp_prelude.h"
#include "kernel_runner.h"
#include "loop/eval.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "runtime/host_compiler.h"

namespace ember::codegen {
namespace {

using loop::Bindings;
using loop::BufferMap;
using loop::DType;
using loop::Kernel;
using loop::Scalar;
using testing::check_against_interpreter;

std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CppEmitter : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / "ember-codegen-test-cache";
    setenv("EMBER_CACHE_DIR", dir_.c_str(), 1);
  }
  std::filesystem::path dir_;
};

TEST_F(CppEmitter, SoftmaxMatchesTheInterpreter) {
  Kernel k = loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/softmax.loop"));
  check_against_interpreter(k, {{"s0", 7}, {"s1", 33}}, 1e-5);
}

TEST_F(CppEmitter, LayerNormWithWelfordMatchesTheInterpreter) {
  Kernel k = loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/layer_norm.loop"));
  Bindings sizes;
  for (const std::string& s : k.size_vars) sizes[s] = s == k.size_vars.back() ? 19 : 5;
  check_against_interpreter(k, sizes, 1e-4);
}

TEST_F(CppEmitter, ArgmaxWithPaddingMatchesTheInterpreter) {
  Kernel k = loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/argmax_pad.loop"));
  check_against_interpreter(k, {{"n", 11}}, 0);
}

TEST_F(CppEmitter, PointwiseKernelIsDeterministicAndMatchesGolden) {
  Kernel k = loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.loop"));
  std::string a = emit_cpp(k);
  EXPECT_EQ(a, emit_cpp(loop::parse_kernel(loop::print_kernel(k))));
  // The golden holds the kernel function: the prelude has its own tests.
  ASSERT_EQ(a.rfind(kCppPrelude, 0), 0u);
  std::string fn = a.substr(std::string(kCppPrelude).size());
  std::string golden_path = std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.cpp.golden";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) {
    std::ofstream(golden_path) << fn;
  }
  EXPECT_EQ(fn, read(golden_path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  check_against_interpreter(k, {{"m", 4}, {"n", 37}}, 1e-5);
}

}  // namespace
}  // namespace ember::codegen
