// The prelude's math (cpp_prelude.h): ember_exp / ember_log / ember_tanh / ember_erf in f32 and f64
// against libm over wide sweeps, through both a vectorized (`omp simd`) loop and a scalar call;
// IEEE special cases; bf16 rounding; the argmax comparison. Compiled by the host compiler with the
// kernel flags.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "codegen/cpp/cpp_prelude.h"
#include "runtime/host_compiler.h"
#include "runtime/kernel_cache.h"

namespace ember::codegen {
namespace {

const char* kHarness = R"(
#define EMBER_MAP(name, T, fn)                                             \
  extern "C" void name##_simd(const T* x, T* y, int64_t n) {               \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] = fn(x[i]);   \
  }                                                                        \
  extern "C" __attribute__((noinline)) T name##_one(T x) { return fn(x); }
EMBER_MAP(exp_f32, float, ember_exp)
EMBER_MAP(exp_f64, double, ember_exp)
EMBER_MAP(log_f32, float, ember_log)
EMBER_MAP(log_f64, double, ember_log)
EMBER_MAP(tanh_f32, float, ember_tanh)
EMBER_MAP(tanh_f64, double, ember_tanh)
EMBER_MAP(erf_f32, float, ember_erf)
EMBER_MAP(erf_f64, double, ember_erf)
extern "C" uint16_t to_bf16(float f) { return ember_bf16(f).bits; }
extern "C" bool arg_better(float x, int64_t i, float v, int64_t k, bool is_max) {
  return ember_arg_better<float>(x, i, v, k, is_max);
}
)";

class PreludeMath : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    auto dir = std::filesystem::temp_directory_path() / "ember-codegen-test-cache";
    ember::runtime::configure_cache(dir.string());
    // Loaded once, kept for the whole suite.
    static std::shared_ptr<runtime::KernelLibrary> lib = runtime::compile_and_load(
        std::string(kCppPrelude) + kHarness, runtime::HostCompileOptions::from());
    lib_ = lib.get();
  }
  template <typename F>
  static F fn(const std::string& name) {
    return reinterpret_cast<F>(lib_->symbol(name));
  }
  static runtime::KernelLibrary* lib_;
};
runtime::KernelLibrary* PreludeMath::lib_ = nullptr;

// |got - want| in units of the last place of `want` rounded to T (the spacing at the subnormal
// scale for tiny results). Both infinite with one sign, or both NaN, is 0.
template <typename T>
double ulp_error(T got, long double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  const long double max = std::numeric_limits<T>::max();
  if (std::fabs(want) > max * (1 + std::numeric_limits<T>::epsilon() / 2)) {
    return std::isinf(got) && (got > 0) == (want > 0) ? 0 : INFINITY;
  }
  T w = static_cast<T>(want);
  T spacing = std::nextafter(std::fabs(w), std::numeric_limits<T>::infinity()) - std::fabs(w);
  spacing = std::max(spacing, std::numeric_limits<T>::denorm_min());
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / spacing);
}

template <typename T>
std::vector<T> sweep() {
  std::vector<T> xs;
  if constexpr (sizeof(T) == 4) {
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
      uint32_t u = static_cast<uint32_t>(b);
      float f;
      std::memcpy(&f, &u, 4);
      xs.push_back(f);
    }
  } else {
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
      uint64_t u = (b << 32) | ((b * 2654435761u) & 0xffffffffu);
      double d;
      std::memcpy(&d, &u, 8);
      xs.push_back(d);
    }
  }
  // Dense where the functions bend: around 0 and 1, the overflow and underflow edges.
  const T edges[] = {T(0), T(1), T(88.72), T(-87.33), T(-103.97), T(709.78), T(-708.4), T(-745.13)};
  for (T e : edges) {
    for (int i = -2000; i <= 2000; ++i) xs.push_back(e + static_cast<T>(i) * T(1e-3));
  }
  const T inf = std::numeric_limits<T>::infinity();
  for (T v : {T(0), -T(0), inf, -inf, std::numeric_limits<T>::quiet_NaN(),
              std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min(),
              std::numeric_limits<T>::max(), -std::numeric_limits<T>::max()}) {
    xs.push_back(v);
  }
  return xs;
}

template <typename T>
void check_fn(const std::string& name, long double (*ref)(long double), double max_ulp) {
  using Simd = void (*)(const T*, T*, int64_t);
  using One = T (*)(T);
  auto simd = PreludeMath::fn<Simd>(name + "_simd");
  auto one = PreludeMath::fn<One>(name + "_one");
  std::vector<T> xs = sweep<T>();
  std::vector<T> ys(xs.size());
  simd(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  double worst = 0;
  T worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    long double want = ref(static_cast<long double>(xs[i]));
    double e = ulp_error<T>(ys[i], want);
    if (e > worst) {
      worst = e;
      worst_x = xs[i];
    }
    // The vectorized and the scalar code compute the same bits (no reassociation).
    T scalar = one(xs[i]);
    ASSERT_TRUE(std::memcmp(&scalar, &ys[i], sizeof(T)) == 0 ||
                (std::isnan(scalar) && std::isnan(ys[i])))
        << name << "(" << xs[i] << "): simd " << ys[i] << " scalar " << scalar;
  }
  EXPECT_LE(worst, max_ulp) << name << " worst at x = " << worst_x;
}

long double ref_exp(long double x) {
  return expl(x);
}
long double ref_log(long double x) {
  return logl(x);
}
long double ref_tanh(long double x) {
  return tanhl(x);
}
long double ref_erf(long double x) {
  return erfl(x);
}

TEST_F(PreludeMath, ExpF32WithinOneUlp) {
  check_fn<float>("exp_f32", ref_exp, 1.0);
}
TEST_F(PreludeMath, ExpF64WithinOneUlp) {
  check_fn<double>("exp_f64", ref_exp, 1.0);
}
TEST_F(PreludeMath, LogF32WithinOneUlp) {
  check_fn<float>("log_f32", ref_log, 1.0);
}
TEST_F(PreludeMath, LogF64WithinOneAndAHalfUlp) {
  check_fn<double>("log_f64", ref_log, 1.5);
}

TEST_F(PreludeMath, TanhF32WithinTwoUlp) {
  check_fn<float>("tanh_f32", ref_tanh, 2.0);
}
TEST_F(PreludeMath, TanhF64WithinTwoUlp) {
  check_fn<double>("tanh_f64", ref_tanh, 2.0);
}

TEST_F(PreludeMath, ErfF32WithinTwoUlp) {
  check_fn<float>("erf_f32", ref_erf, 2.0);
}
TEST_F(PreludeMath, ErfF64WithinTwoUlp) {
  check_fn<double>("erf_f64", ref_erf, 2.0);
}

TEST_F(PreludeMath, SpecialValues) {
  auto expf_ = fn<float (*)(float)>("exp_f32_one");
  auto logf_ = fn<float (*)(float)>("log_f32_one");
  auto exp_ = fn<double (*)(double)>("exp_f64_one");
  auto log_ = fn<double (*)(double)>("log_f64_one");
  const float inf = INFINITY;
  EXPECT_EQ(expf_(0.0f), 1.0f);
  EXPECT_EQ(expf_(-0.0f), 1.0f);
  EXPECT_EQ(expf_(inf), inf);
  EXPECT_EQ(expf_(-inf), 0.0f);
  EXPECT_TRUE(std::isnan(expf_(NAN)));
  EXPECT_EQ(expf_(88.8f), inf);     // overflow
  EXPECT_EQ(expf_(-104.0f), 0.0f);  // underflow
  EXPECT_GT(expf_(-100.0f), 0.0f);  // a subnormal result
  EXPECT_EQ(expf_(-100.0f), std::exp(-100.0f));
  EXPECT_EQ(exp_(710.0), static_cast<double>(inf));
  EXPECT_EQ(exp_(-746.0), 0.0);
  EXPECT_EQ(exp_(-740.0), std::exp(-740.0));
  EXPECT_EQ(logf_(1.0f), 0.0f);
  EXPECT_EQ(logf_(0.0f), -inf);
  EXPECT_EQ(logf_(-0.0f), -inf);
  EXPECT_TRUE(std::isnan(logf_(-1.0f)));
  EXPECT_TRUE(std::isnan(logf_(-inf)));
  EXPECT_TRUE(std::isnan(logf_(NAN)));
  EXPECT_EQ(logf_(inf), inf);
  EXPECT_EQ(logf_(1e-45f), std::log(1e-45f));  // subnormal input
  EXPECT_EQ(log_(0.0), -static_cast<double>(inf));
  EXPECT_TRUE(std::isnan(log_(-2.0)));
  EXPECT_EQ(log_(4.9e-324), std::log(4.9e-324));
  auto tanhf_ = fn<float (*)(float)>("tanh_f32_one");
  auto tanh_ = fn<double (*)(double)>("tanh_f64_one");
  EXPECT_EQ(tanhf_(inf), 1.0f);
  EXPECT_EQ(tanhf_(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(tanhf_(-0.0f)) && tanhf_(-0.0f) == 0.0f);
  EXPECT_TRUE(std::isnan(tanhf_(NAN)));
  EXPECT_EQ(tanhf_(1e-40f), 1e-40f);  // subnormal: tanh(x) = x
  EXPECT_EQ(tanh_(-30.0), -1.0);
  EXPECT_EQ(tanh_(1e-300), 1e-300);
  auto erff_ = fn<float (*)(float)>("erf_f32_one");
  auto erf_ = fn<double (*)(double)>("erf_f64_one");
  EXPECT_EQ(erff_(inf), 1.0f);
  EXPECT_EQ(erff_(-inf), -1.0f);
  EXPECT_EQ(erff_(5.0f), 1.0f);
  EXPECT_TRUE(std::signbit(erff_(-0.0f)) && erff_(-0.0f) == 0.0f);
  EXPECT_TRUE(std::isnan(erff_(NAN)));
  EXPECT_TRUE(std::isnan(erf_(-static_cast<double>(NAN))));
  EXPECT_EQ(erf_(-7.0), -1.0);
  EXPECT_EQ(erf_(static_cast<double>(inf)), 1.0);
}

TEST_F(PreludeMath, Bf16RoundsToNearestEven) {
  auto to_bf16 = fn<uint16_t (*)(float)>("to_bf16");
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(bits(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(to_bf16(bits(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(to_bf16(bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(to_bf16(bits(0x7f7fffff)), 0x7f80);  // rounds up to inf
  uint16_t nan = to_bf16(bits(0x7f800001));      // a NaN whose payload is in the low half
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x7f, 0);
}

TEST_F(PreludeMath, ArgBetterPrefersNanThenTheLowerIndex) {
  auto better = fn<bool (*)(float, int64_t, float, int64_t, bool)>("arg_better");
  for (bool is_max : {true, false}) {
    float big = is_max ? 2.0f : -2.0f;
    EXPECT_TRUE(better(big, 5, 1.0f, 3, is_max));
    EXPECT_FALSE(better(1.0f, 5, big, 3, is_max));
    EXPECT_TRUE(better(1.0f, 2, 1.0f, 3, is_max));  // tie: lower index
    EXPECT_FALSE(better(1.0f, 4, 1.0f, 3, is_max));
    EXPECT_TRUE(better(NAN, 9, big, 3, is_max));  // NaN wins
    EXPECT_FALSE(better(big, 1, NAN, 3, is_max));
    EXPECT_TRUE(better(NAN, 1, NAN, 3, is_max));  // both NaN: lower index
    EXPECT_FALSE(better(NAN, 4, NAN, 3, is_max));
  }
}

}  // namespace
}  // namespace ember::codegen
