#include "codegen/cpp/cpp_emitter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

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

std::string read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using KernelFn = void (*)(void* const*, const int64_t*);

// Number of elements a buffer parameter spans for `sizes`.
int64_t extent(const loop::BufferParam& b, const Bindings& sizes) {
  int64_t n = 1;
  for (size_t d = 0; d < b.sizes.size(); ++d) {
    loop::EvalEnv env;
    env.sizes = sizes;
    int64_t s = loop::eval_expr(b.sizes[d], env).i;
    int64_t st = loop::eval_expr(b.strides[d], env).i;
    if (s == 0) return 0;
    n += (s - 1) * st;
  }
  return n;
}

// Runs `k` compiled by the host compiler and by the reference interpreter on the same random
// inputs; asserts every output element agrees (floats within `tol` relative, NaN == NaN).
void check_against_interpreter(const Kernel& k, const Bindings& sizes, double tol) {
  std::string src = emit_cpp(k);
  auto lib = runtime::compile_and_load(src, runtime::HostCompileOptions::from_env());
  auto fn = reinterpret_cast<KernelFn>(lib->symbol(cpp_kernel_symbol(k.name)));

  std::mt19937 rng(1234);
  std::normal_distribution<double> normal;
  BufferMap ref;
  std::vector<std::vector<double>> f64_store(k.buffers.size());
  std::vector<std::vector<float>> f32_store(k.buffers.size());
  std::vector<std::vector<int64_t>> i64_store(k.buffers.size());
  std::vector<void*> ptrs;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const auto& b = k.buffers[i];
    int64_t n = extent(b, sizes);
    std::vector<Scalar> vals;
    for (int64_t j = 0; j < n; ++j) {
      double v = normal(rng);
      if (b.dtype == DType::Float32) v = static_cast<float>(v);
      vals.push_back(loop::is_float(b.dtype)
                         ? Scalar::of_float(b.dtype, v)
                         : Scalar::of_int(b.dtype, static_cast<int64_t>(v * 10)));
    }
    switch (b.dtype) {
      case DType::Float32:
        for (const Scalar& s : vals) f32_store[i].push_back(static_cast<float>(s.f));
        ptrs.push_back(f32_store[i].data());
        break;
      case DType::Float64:
        for (const Scalar& s : vals) f64_store[i].push_back(s.f);
        ptrs.push_back(f64_store[i].data());
        break;
      case DType::Int64:
        for (const Scalar& s : vals) i64_store[i].push_back(s.i);
        ptrs.push_back(i64_store[i].data());
        break;
      default:
        FAIL() << "test harness supports f32, f64 and i64 buffers";
    }
    ref[b.name] = vals;
  }
  std::vector<int64_t> size_values;
  for (const std::string& s : k.size_vars) size_values.push_back(sizes.at(s));
  fn(ptrs.data(), size_values.data());
  loop::run_kernel(k, sizes, ref);

  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const auto& b = k.buffers[i];
    if (b.role == loop::BufferRole::Input) continue;
    const auto& expect = ref[b.name];
    for (size_t j = 0; j < expect.size(); ++j) {
      double want = expect[j].as_double();
      double got = b.dtype == DType::Float32   ? f32_store[i][j]
                   : b.dtype == DType::Float64 ? f64_store[i][j]
                                               : static_cast<double>(i64_store[i][j]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << b.name << "[" << j << "]";
        continue;
      }
      EXPECT_NEAR(got, want, tol * (1 + std::fabs(want))) << b.name << "[" << j << "]";
    }
  }
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
  std::string golden_path = std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.cpp.golden";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) {
    std::ofstream(golden_path) << a;
  }
  EXPECT_EQ(a, read(golden_path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  check_against_interpreter(k, {{"m", 4}, {"n", 37}}, 1e-5);
}

}  // namespace
}  // namespace ember::codegen
