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
#include "runtime/kernel_cache.h"

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
    ember::runtime::configure_cache(dir_.string());
  }
  std::filesystem::path dir_;
};

TEST_F(CppEmitter, SoftmaxMatchesTheInterpreter) {
  Kernel k = loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/softmax.loop"));
  check_against_interpreter(k, {{"s0", 7}, {"s1", 33}}, 1e-5);
}

// A bool buffer is bytes in memory (uint8_t) and bool once read: GCC has no vector type for a load
// of `bool`, so a loop reading a mask (masked_fill's select) ran scalar. The kernel still agrees
// with the interpreter: selects, a bool output, and an `any` reduction into a bool buffer.
TEST_F(CppEmitter, BoolBuffersAreBytesAndMatchTheInterpreter) {
  const std::string text =
      "kernel masked(n) {\n"
      "  input x : f32[n] strides [1]\n"
      "  input m : b8[n] strides [1]\n"
      "  output y : f32[n] strides [1]\n"
      "  output z : b8[n] strides [1]\n"
      "  output a : b8[1] strides [1]\n"
      "  a[0] = false\n"
      "  for (i, 0, n) vectorized {\n"
      "    y[i] = select(m[i], f32(-inf), (x[i] * f32(0.5)))\n"
      "    z[i] = (m[i] && (f32(0) < x[i]))\n"
      "    accumulate any a[0] <- m[i]\n"
      "  }\n"
      "}\n";
  Kernel k = loop::parse_kernel(text);
  const std::string src = emit_cpp(k);
  EXPECT_NE(src.find("uint8_t* const p_m = static_cast<uint8_t*>(buffers[1]);"), std::string::npos)
      << src;
  EXPECT_EQ(src.find("bool*"), std::string::npos) << src;
  EXPECT_NE(src.find("static_cast<bool>(b_m["), std::string::npos) << src;
  check_against_interpreter(k, {{"n", 37}}, 0);
}

// Note [Selects of loads]: a select whose arm loads is a call that evaluates both arms where that
// is safe, so the loop vectorizes (ReLU's backward ran scalar, 27x slower). A load the loop keeps
// in its buffer is read as it is; a guarded one (a window over a padding) is clamped into its
// buffer; an integer division by a loaded divisor (0 where the select does not choose it) stays
// behind the condition; a concatenation along the loop is split instead. Each agrees with the
// interpreter.
TEST_F(CppEmitter, SelectsOfLoadsEvaluateBothArmsWhereThatIsSafe) {
  const std::string relu_backward =
      "kernel relu_backward() {\n"
      "  input x : f32[64] strides [1]\n"
      "  input g : f32[64] strides [1]\n"
      "  output y : f32[64] strides [1]\n"
      "  for (i, 0, 64) vectorized {\n"
      "    y[i] = select((x[i] <= f32(0)), f32(0), g[i])\n"
      "  }\n"
      "}\n";
  Kernel k = loop::parse_kernel(relu_backward);
  std::string src = emit_cpp(k);
  EXPECT_NE(src.find("ember_select((b_x[v_i] <= "), std::string::npos) << src;
  EXPECT_EQ(src.find("ember_min<int64_t>(ember_max<int64_t>("), std::string::npos) << src;
  check_against_interpreter(k, {}, 0);

  // A window over a padding (a pooling's): the guarded read is clamped into its buffer, and the
  // select still reads both arms.
  const std::string pad =
      "kernel pad() {\n"
      "  input a : f32[32] strides [1]\n"
      "  output y : f32[96] strides [1]\n"
      "  for (r, 0, 3) {\n"
      "    for (i, 0, 32) vectorized {\n"
      "      y[((r * 32) + i)] = select(((1 <= (i + r)) && ((i + r) < 33)), a[((i + r) - 1)], "
      "f32(0))\n"
      "    }\n"
      "  }\n"
      "}\n";
  k = loop::parse_kernel(pad);
  src = emit_cpp(k);
  EXPECT_NE(src.find("] = ember_select("), std::string::npos) << src;
  EXPECT_NE(src.find("b_a[ember_min<int64_t>(ember_max<int64_t>(((v_i + v_r) - 1LL), 0LL), 31LL)]"),
            std::string::npos)
      << src;
  check_against_interpreter(k, {}, 0);

  // A concatenation along the loop is split into one loop per part (loop/split_loops.h): no
  // select is left, each part read contiguously.
  const std::string cat =
      "kernel cat() {\n"
      "  input a : f32[32] strides [1]\n"
      "  input b : f32[32] strides [1]\n"
      "  output y : f32[64] strides [1]\n"
      "  for (i, 0, 64) vectorized {\n"
      "    y[i] = select((i < 32), a[i], b[(i - 32)])\n"
      "  }\n"
      "}\n";
  k = loop::parse_kernel(cat);
  src = emit_cpp(k);
  EXPECT_NE(src.find("b_y[v_i] = b_a[v_i];"), std::string::npos) << src;
  EXPECT_NE(src.find("b_y[v_i] = b_b[(v_i - 32LL)];"), std::string::npos) << src;
  check_against_interpreter(k, {}, 0);

  const std::string divide =
      "kernel divide() {\n"
      "  input x : i64[16] strides [1]\n"
      "  input d : i64[16] strides [1]\n"
      "  output y : i64[16] strides [1]\n"
      "  for (i, 0, 16) vectorized {\n"
      "    y[i] = select((d[i] != i64(0)), (x[i] // d[i]), i64(0))\n"
      "  }\n"
      "}\n";
  k = loop::parse_kernel(divide);
  src = emit_cpp(k);
  EXPECT_NE(src.find("b_y[v_i] = ((b_d[v_i] != 0LL) ? ember_floordiv"), std::string::npos) << src;
  BufferMap inputs = testing::random_buffers(k, {});
  for (int j : {0, 5, 11}) inputs["d"][j] = Scalar::of_int(DType::Int64, 0);
  check_against_interpreter(k, {}, 0, inputs);
}

// A parallel loop with a run-time condition (a kernel over shape symbols): the OpenMP region's
// `if` clause, so that a call at a small size runs on the calling thread; the kernel agrees with
// the interpreter on both sides of the threshold.
TEST_F(CppEmitter, AParallelLoopsConditionIsTheRegionsIfClause) {
  const std::string text =
      "kernel scale(n, m) {\n"
      "  input x : f32[n, m] strides [m, 1]\n"
      "  output y : f32[n, m] strides [m, 1]\n"
      "  for (i, 0, n) parallel if (64 <= (n * m)) {\n"
      "    for (j, 0, m) vectorized {\n"
      "      y[(j + (i * m))] = (x[(j + (i * m))] * f32(2))\n"
      "    }\n"
      "  }\n"
      "}\n";
  Kernel k = loop::parse_kernel(text);
  const std::string src = emit_cpp(k);
  EXPECT_NE(src.find("#pragma omp parallel for schedule(static) if((64LL <= (s_n * s_m)))"),
            std::string::npos)
      << src;
  check_against_interpreter(k, {{"n", 3}, {"m", 5}}, 0);
  check_against_interpreter(k, {{"n", 9}, {"m", 17}}, 0);
}

// Every integer type, every shift amount from -3 to width + 2 and a range of values: the
// compiled shifts and bitwise ops agree with the interpreter (which follows torch's CPU kernels).
TEST_F(CppEmitter, BitwiseOpsAndShiftsMatchTheInterpreter) {
  const std::string text =
      "kernel bits(n) {\n"
      "  input a : T[n] strides [1]\n"
      "  input b : T[n] strides [1]\n"
      "  output l : T[n] strides [1]\n"
      "  output r : T[n] strides [1]\n"
      "  output m : T[n] strides [1]\n"
      "  for (i, 0, n) vectorized {\n"
      "    l[i] = (a[i] << b[i])\n"
      "    r[i] = (a[i] >> b[i])\n"
      "    m[i] = (((a[i] & b[i]) | T(6)) ^ (a[i] ^ T(ONES)))\n"
      "  }\n"
      "}\n";
  for (const std::string ty : {"u8", "i8", "i16", "i32", "i64"}) {
    std::string src = text;
    for (size_t at; (at = src.find("ONES")) != std::string::npos;) {
      src.replace(at, 4, ty == "u8" ? "255" : "-1");
    }
    for (size_t at; (at = src.find('T')) != std::string::npos;) src.replace(at, 1, ty);
    Kernel k = loop::parse_kernel(src);
    const DType dt = *loop::parse_dtype(ty);
    const int bits = loop::dtype_bits(dt);
    BufferMap in;
    for (int64_t v : {0, 1, -1, 5, -7, 100, -128, 127, 255, 300, -40000}) {
      for (int s = -3; s <= bits + 2; ++s) {
        in["a"].push_back(Scalar::of_int(dt, v));
        in["b"].push_back(Scalar::of_int(dt, s));
      }
    }
    const int64_t n = static_cast<int64_t>(in["a"].size());
    for (const char* o : {"l", "r", "m"}) in[o].assign(n, Scalar::of_int(dt, 0));
    SCOPED_TRACE(ty);
    check_against_interpreter(k, {{"n", n}}, 0, in);
  }
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
