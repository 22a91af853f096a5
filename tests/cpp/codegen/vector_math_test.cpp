// The prelude's libm calls inside `#pragma omp simd` loops: with libmvec (HostCompileOptions::
// from_env on glibc >= 2.35) they become calls to glibc's vector functions. These tests check that
// the vector versions are used and that they agree with scalar libm to a few ulp, special values
// included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cpp/cpp_prelude.h"
#include "runtime/host_compiler.h"

namespace ember::codegen {
namespace {

const char* const kFunctions[] = {"exp",   "exp2", "expm1", "log", "log2", "log10",
                                  "log1p", "sin",  "cos",   "tan", "atan", "sinh",
                                  "cosh",  "tanh", "asinh", "erf", "erfc", "cbrt"};

// One kernel per function and float type: y[i] = std::f(x[i]) over a vectorized loop.
std::string source() {
  std::ostringstream s;
  s << kCppPrelude;
  for (const char* f : kFunctions) {
    for (const char* t : {"float", "double"}) {
      s << "extern \"C\" void vm_" << f << "_" << t << "(const " << t << "* x, " << t
        << "* y, int64_t n) {\n#pragma omp simd\n  for (int64_t i = 0; i < n; ++i) y[i] = std::"
        << f << "(x[i]);\n}\n";
    }
  }
  return s.str();
}

// Distance in units in the last place between two finite floats of the same sign class.
template <typename T>
double ulps(T a, T b) {
  if (a == b) return 0;
  T scale = std::max(std::fabs(a), std::fabs(b));
  int e = 0;
  std::frexp(scale, &e);
  T ulp = std::ldexp(T(1), e - std::numeric_limits<T>::digits);
  // Results that underflow to subnormals are compared in units of the smallest normal's ulp.
  ulp = std::max(ulp, std::numeric_limits<T>::denorm_min());
  return static_cast<double>(std::fabs(a - b) / ulp);
}

template <typename T>
std::vector<T> inputs() {
  std::vector<T> x;
  for (int i = -2000; i <= 2000; ++i) x.push_back(static_cast<T>(i) * T(0.0137));
  for (int e = -40; e <= 40; e += 3) {
    x.push_back(std::ldexp(T(1.3), e));
    x.push_back(-std::ldexp(T(1.7), e));
  }
  for (T v : {T(0), T(-0.0), T(88.5), T(-103), T(709), T(-745), std::numeric_limits<T>::infinity(),
              -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(),
              std::numeric_limits<T>::min(), std::numeric_limits<T>::denorm_min()}) {
    x.push_back(v);
  }
  return x;
}

template <typename T>
void check(const runtime::KernelLibrary& lib, const char* f, double max_ulps) {
  using Fn = void (*)(const T*, T*, int64_t);
  std::string name = std::string("vm_") + f + "_" + (sizeof(T) == 4 ? "float" : "double");
  auto fn = reinterpret_cast<Fn>(lib.symbol(name));
  std::vector<T> x = inputs<T>();
  std::vector<T> y(x.size());
  fn(x.data(), y.data(), static_cast<int64_t>(x.size()));
  std::vector<T> ref(x.size());
  // The reference: the scalar libm function of the same type, called one element at a time
  // through a volatile pointer so the compiler cannot vectorize it.
  T (*volatile scalar)(T) = nullptr;
  if constexpr (sizeof(T) == 4) {
    static const std::map<std::string, float (*)(float)> fs = {
        {"exp", ::expf},   {"exp2", ::exp2f},   {"expm1", ::expm1f}, {"log", ::logf},
        {"log2", ::log2f}, {"log10", ::log10f}, {"log1p", ::log1pf}, {"sin", ::sinf},
        {"cos", ::cosf},   {"tan", ::tanf},     {"atan", ::atanf},   {"sinh", ::sinhf},
        {"cosh", ::coshf}, {"tanh", ::tanhf},   {"asinh", ::asinhf}, {"erf", ::erff},
        {"erfc", ::erfcf}, {"cbrt", ::cbrtf}};
    scalar = fs.at(f);
  } else {
    static const std::map<std::string, double (*)(double)> fs = {
        {"exp", ::exp},   {"exp2", ::exp2},   {"expm1", ::expm1}, {"log", ::log},
        {"log2", ::log2}, {"log10", ::log10}, {"log1p", ::log1p}, {"sin", ::sin},
        {"cos", ::cos},   {"tan", ::tan},     {"atan", ::atan},   {"sinh", ::sinh},
        {"cosh", ::cosh}, {"tanh", ::tanh},   {"asinh", ::asinh}, {"erf", ::erf},
        {"erfc", ::erfc}, {"cbrt", ::cbrt}};
    scalar = fs.at(f);
  }
  for (size_t i = 0; i < x.size(); ++i) ref[i] = scalar(x[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(std::string(f) + "(" + std::to_string(static_cast<double>(x[i])) + ")");
    if (std::isnan(ref[i])) {
      EXPECT_TRUE(std::isnan(y[i])) << "got " << y[i];
    } else if (std::isinf(ref[i]) || ref[i] == 0) {
      EXPECT_EQ(y[i], ref[i]);
    } else {
      EXPECT_LE(ulps(y[i], ref[i]), max_ulps) << "got " << y[i] << " want " << ref[i];
    }
  }
}

TEST(VectorMath, PreludeMathInSimdLoopsMatchesScalarLibm) {
  runtime::HostCompileOptions opts = runtime::HostCompileOptions::from();
  auto lib = runtime::compile_and_load(source(), opts);
  for (const char* f : kFunctions) {
    // libmvec documents at most 4 ulp for its functions; scalar libm is within 1-2 ulp.
    check<float>(*lib, f, 6);
    check<double>(*lib, f, 6);
  }
  if (runtime::libmvec_usable()) {
    // The loops call libmvec's vector functions (their names start with _ZGV).
    std::ifstream in(lib->path(), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    EXPECT_NE(bytes.str().find("_ZGV"), std::string::npos) << "no libmvec call in " << lib->path();
  }
}

}  // namespace
}  // namespace ember::codegen
