// Reductions over vectorized loops (lanes, cascade, tree combine): compiled kernels against the
// interpreter and against exact references, NaN and tie semantics, and the generated code's shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "codegen/cpp/cpp_emitter.h"
#include "codegen/cpp/cpp_prelude.h"
#include "kernel_runner.h"
#include "loop/eval.h"
#include "loop/parser.h"

namespace ember::codegen {
namespace {

using loop::Bindings;
using loop::BufferMap;
using loop::DType;
using loop::Kernel;
using loop::Scalar;
using testing::check_against_interpreter;
using testing::run_compiled;

class CppReduction : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / "ember-codegen-test-cache";
    ember::runtime::configure_cache(dir_.string());
  }
  std::filesystem::path dir_;
};

// A row reduction `op` of x : <dtype>[m, n] into y : <acc>[m], the row loop vectorized. `n` is a
// size variable, or a constant when `constant_n` > 0 (the emitter then sizes the lanes to it).
Kernel row_reduction(const std::string& op, const std::string& dtype, const std::string& acc,
                     const std::string& init, int64_t constant_n = 0,
                     const std::string& value = "x[((i * N) + r)]") {
  std::string n = constant_n > 0 ? std::to_string(constant_n) : "n";
  std::string v = value;
  for (size_t p; (p = v.find('N')) != std::string::npos;) v.replace(p, 1, n);
  std::string sizes = constant_n > 0 ? "m" : "m, n";
  std::ostringstream s;
  s << "kernel red(" << sizes << ") {\n"
    << "  input x : " << dtype << "[m, " << n << "] strides [" << n << ", 1]\n"
    << "  output y : " << acc << "[m] strides [1]\n"
    << "  for (i, 0, m) {\n"
    << "    alloc a : " << acc << "[1] {\n"
    << "      a[0] = " << init << "\n"
    << "      for (r, 0, " << n << ") vectorized {\n"
    << "        accumulate " << op << " a[0] <- " << v << "\n"
    << "      }\n"
    << "      y[i] = a[0]\n"
    << "    }\n"
    << "  }\n"
    << "}\n";
  return loop::parse_kernel(s.str());
}

Bindings sizes_for(const Kernel& k, int64_t m, int64_t n) {
  Bindings b{{"m", m}};
  if (k.size_vars.size() > 1) b["n"] = n;
  return b;
}

const int64_t kLengths[] = {1, 3, 4, 7, 8, 40, 64, 100, 1000, 2048 + 37, 70001};

// Sums against an exact (double) reference: the cascade keeps the error near that of a pairwise
// sum, far below the interpreter's sequential f32 sum for long rows.
TEST_F(CppReduction, FloatSumsAreAccurateAtEveryLength) {
  for (int64_t n : kLengths) {
    for (int64_t constant : {int64_t{0}, n}) {
      Kernel k = row_reduction("sum", "f32", "f32", "f32(0)", constant);
      Bindings sizes = sizes_for(k, 3, n);
      BufferMap bufs = testing::random_buffers(k, sizes, static_cast<uint32_t>(n));
      run_compiled(k, sizes, bufs);
      for (int64_t i = 0; i < 3; ++i) {
        double exact = 0, magnitude = 0;
        for (int64_t r = 0; r < n; ++r) {
          exact += bufs["x"][i * n + r].f;
          magnitude += std::fabs(bufs["x"][i * n + r].f);
        }
        double err = std::fabs(bufs["y"][i].f - exact);
        EXPECT_LE(err, 8 * std::numeric_limits<float>::epsilon() * magnitude + 1e-30)
            << "n=" << n << " constant=" << constant << " row " << i;
      }
    }
  }
}

TEST_F(CppReduction, CascadeKeepsLongConstantSumsExact) {
  // 2^20 copies of 0.1f: a sequential f32 sum is off by about 1%; the cascade by about 1e-7.
  const int64_t n = int64_t{1} << 20;
  Kernel k = row_reduction("sum", "f32", "f32", "f32(0)");
  Bindings sizes = sizes_for(k, 1, n);
  BufferMap bufs;
  bufs["x"].assign(n, Scalar::of_float(DType::Float32, 0.1f));
  bufs["y"].resize(1);
  run_compiled(k, sizes, bufs);
  double exact = static_cast<double>(0.1f) * n;
  EXPECT_NEAR(bufs["y"][0].f, exact, exact * 1e-6);
}

TEST_F(CppReduction, MatchesTheInterpreterForEveryOp) {
  struct Case {
    std::string op, dtype, acc, init;
    double tol;
  };
  const Case cases[] = {
      {"sum", "f64", "f64", "f64(0)", 1e-12},
      {"prod", "f64", "f64", "f64(1)", 1e-12},
      {"max", "f32", "f32", "f32(-inf)", 0},
      {"min", "f64", "f64", "f64(inf)", 0},
      {"sum", "i64", "i64", "0", 0},
      {"sum", "i32", "i32", "i32(0)", 0},
      {"max", "i32", "i32", "i32(-2147483648)", 0},
  };
  for (const Case& c : cases) {
    for (int64_t n : {1, 33, 250}) {
      for (int64_t constant : {int64_t{0}, n}) {
        SCOPED_TRACE(c.op + " " + c.dtype + " n=" + std::to_string(n) +
                     (constant ? " constant" : ""));
        Kernel k = row_reduction(c.op, c.dtype, c.acc, c.init, constant);
        check_against_interpreter(k, sizes_for(k, 4, n), c.tol);
      }
    }
  }
}

TEST_F(CppReduction, MaxAndMinPropagateNanFromAnyLane) {
  for (const char* op : {"max", "min"}) {
    for (int64_t n : {7, 64, 200}) {
      Kernel k =
          row_reduction(op, "f32", "f32", op == std::string("max") ? "f32(-inf)" : "f32(inf)");
      Bindings sizes = sizes_for(k, 4, n);
      BufferMap bufs = testing::random_buffers(k, sizes);
      bufs["x"][0 * n + 0] = Scalar::of_float(DType::Float32, NAN);      // first lane
      bufs["x"][1 * n + n - 1] = Scalar::of_float(DType::Float32, NAN);  // the tail
      bufs["x"][2 * n + n / 2] = Scalar::of_float(DType::Float32, INFINITY);
      run_compiled(k, sizes, bufs);
      EXPECT_TRUE(std::isnan(bufs["y"][0].f)) << op << " n=" << n;
      EXPECT_TRUE(std::isnan(bufs["y"][1].f)) << op << " n=" << n;
      EXPECT_FALSE(std::isnan(bufs["y"][2].f)) << op << " n=" << n;
      if (op == std::string("max")) {
        EXPECT_EQ(bufs["y"][2].f, INFINITY);
      }
    }
  }
}

Kernel argreduce(const std::string& op) {
  return loop::parse_kernel(
      "kernel arg(m, n) {\n"
      "  input x : f32[m, n] strides [n, 1]\n"
      "  output k : i64[m] strides [1]\n"
      "  for (i, 0, m) {\n"
      "    alloc v : f32[1] {\n"
      "      alloc j : i64[1] {\n"
      "        v[0] = f32(" +
      std::string(op == "argmax" ? "-inf" : "inf") +
      ")\n"
      "        j[0] = 9223372036854775807\n"
      "        for (r, 0, n) vectorized {\n"
      "          accumulate " +
      op +
      " (v, j)[0] <- (x[((i * n) + r)], r)\n"
      "        }\n"
      "        k[i] = j[0]\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n");
}

// Ties go to the lowest index and NaN wins, whichever lanes they land in.
TEST_F(CppReduction, ArgMaxAndArgMinLikeEager) {
  for (const char* op : {"argmax", "argmin"}) {
    Kernel k = argreduce(op);
    for (int64_t n : {5, 64, 130}) {
      SCOPED_TRACE(std::string(op) + " n=" + std::to_string(n));
      Bindings sizes{{"m", 5}, {"n", n}};
      BufferMap bufs = testing::random_buffers(k, sizes);
      // Row 0: small integers, many ties. Row 1: two NaNs. Row 2: all equal. Row 3: extreme
      // value at the end (tail).
      for (int64_t r = 0; r < n; ++r) {
        bufs["x"][r] = Scalar::of_float(DType::Float32, static_cast<double>((r * 7) % 3));
        bufs["x"][2 * n + r] = Scalar::of_float(DType::Float32, 1.5);
      }
      bufs["x"][n + n / 3] = Scalar::of_float(DType::Float32, NAN);
      bufs["x"][n + n - 1] = Scalar::of_float(DType::Float32, NAN);
      bufs["x"][3 * n + n - 1] =
          Scalar::of_float(DType::Float32, op == std::string("argmax") ? 99 : -99);
      check_against_interpreter(k, sizes, 0, bufs);
      BufferMap got = bufs;
      run_compiled(k, sizes, got);
      EXPECT_EQ(got["k"][1].i, n / 3);
      EXPECT_EQ(got["k"][2].i, 0);
      EXPECT_EQ(got["k"][3].i, n - 1);
    }
  }
}

TEST_F(CppReduction, AnyAndAllOverBools) {
  for (const char* op : {"any", "all"}) {
    for (int64_t n : {3, 64, 77}) {
      Kernel k = row_reduction(op, "b8", "b8", op == std::string("any") ? "false" : "true");
      Bindings sizes = sizes_for(k, 4, n);
      BufferMap bufs = testing::random_buffers(k, sizes);
      for (int64_t r = 0; r < n; ++r) {
        bufs["x"][r] = Scalar::of_int(DType::Bool, 0);
        bufs["x"][n + r] = Scalar::of_int(DType::Bool, 1);
        bufs["x"][2 * n + r] = Scalar::of_int(DType::Bool, r == n - 1);
      }
      check_against_interpreter(k, sizes, 0, bufs);
    }
  }
}

// Softmax's middle pass: a loop that stores exp(x - max) and sums it, in lanes.
TEST_F(CppReduction, StoresAndSeveralAccumulatorsInOneLoop) {
  Kernel k = loop::parse_kernel(R"(kernel two(m, n) {
  input x : f32[m, n] strides [n, 1]
  output e : f32[m, n] strides [n, 1]
  output s : f32[m] strides [1]
  output mx : f32[m] strides [1]
  for (i, 0, m) {
    alloc a : f32[1] {
      alloc b : f32[1] {
        a[0] = f32(0)
        b[0] = f32(-inf)
        for (r, 0, n) vectorized {
          let t = exp(x[((i * n) + r)]) {
            e[((i * n) + r)] = t
            accumulate sum a[0] <- t
            accumulate max b[0] <- x[((i * n) + r)]
          }
        }
        s[i] = a[0]
        mx[i] = b[0]
      }
    }
  }
}
)");
  check_against_interpreter(k, {{"m", 3}, {"n", 100}}, 1e-5);
  std::string src = emit_cpp(k);
  EXPECT_NE(src.find("in 64 lanes"), std::string::npos) << src;
}

// A reduction the lanes cannot take (Welford) stays correct: the loop runs serially, without
// `omp simd`.
TEST_F(CppReduction, WelfordOverAVectorizedLoopRunsSerially) {
  Kernel k = loop::parse_kernel(R"(kernel w(m, n) {
  input x : f32[m, n] strides [n, 1]
  output y : f32[m] strides [1]
  for (i, 0, m) {
    alloc mu : f32[1] {
      alloc m2 : f32[1] {
        alloc c : f32[1] {
          mu[0] = f32(0)
          m2[0] = f32(0)
          c[0] = f32(0)
          for (r, 0, n) vectorized {
            accumulate welford (mu, m2, c)[0] <- x[((i * n) + r)]
          }
          y[i] = m2[0]
        }
      }
    }
  }
}
)");
  check_against_interpreter(k, {{"m", 3}, {"n", 50}}, 1e-5);
  std::string src = emit_cpp(k);
  EXPECT_NE(src.find("run serially"), std::string::npos) << src;
  EXPECT_EQ(src.find("// reduction over"), std::string::npos);
}

// An accumulator indexed by the vectorized loop itself (a column reduction) needs no lanes.
TEST_F(CppReduction, ElementwiseAccumulatesStayPlainSimd) {
  Kernel k = loop::parse_kernel(R"(kernel cols(m, n) {
  input x : f32[m, n] strides [n, 1]
  output y : f32[n] strides [1]
  alloc a : f32[n] {
    for (c, 0, n) vectorized {
      a[c] = f32(0)
    }
    for (r, 0, m) {
      for (c, 0, n) vectorized {
        accumulate sum a[c] <- x[((r * n) + c)]
      }
    }
    for (c, 0, n) vectorized {
      y[c] = a[c]
    }
  }
}
)");
  check_against_interpreter(k, {{"m", 9}, {"n", 37}}, 1e-5);
  EXPECT_EQ(emit_cpp(k).find("// reduction over"), std::string::npos);
}

TEST_F(CppReduction, GeneratedCodeIsDeterministicAndMatchesGolden) {
  Kernel k = row_reduction("sum", "f32", "f32", "f32(0)", 4096, "exp(x[((i * N) + r)])");
  std::string a = emit_cpp(k);
  EXPECT_EQ(a, emit_cpp(loop::parse_kernel(loop::print_kernel(k))));
  std::string fn = a.substr(std::string(kCppPrelude).size());
  std::string golden_path = std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/row_sum_exp.cpp.golden";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(golden_path) << fn;
  std::ifstream in(golden_path);
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(fn, want.str()) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  check_against_interpreter(k, {{"m", 2}}, 1e-5);
}

}  // namespace
}  // namespace ember::codegen
