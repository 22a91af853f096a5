/// \file
/// Test helper: runs a loop-IR Kernel compiled by the C++ emitter and the host compiler on
/// interpreter-style buffers (loop::BufferMap), so a test can compare the compiled kernel with
/// the reference interpreter (loop/eval.h) element by element. Header-only; used by the codegen
/// and scheduler tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpp/cpp_emitter.h"
#include "loop/eval.h"
#include "loop/printer.h"
#include "runtime/host_compiler.h"
#include "runtime/kernel_cache.h"

namespace ember::codegen::testing {

/// Elements a buffer parameter spans for `sizes` (1 + sum of (size - 1) * stride; 0 if empty).
inline int64_t buffer_extent(const loop::BufferParam& b, const loop::Bindings& sizes) {
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

inline size_t element_bytes(loop::DType t) {
  return t == loop::DType::Bool ? 1 : static_cast<size_t>(loop::dtype_bits(t) / 8);
}

/// Writes `s` into `p` as an element of type `t` (bf16 rounded to nearest even).
inline void pack(loop::DType t, const loop::Scalar& s, unsigned char* p) {
  using loop::DType;
  auto put = [&](auto v) { std::memcpy(p, &v, sizeof v); };
  switch (t) {
    case DType::Float32:
      return put(static_cast<float>(s.f));
    case DType::Float64:
      return put(s.f);
    case DType::BFloat16: {
      float f = static_cast<float>(s.f);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t bits = (u & 0x7fffffffu) > 0x7f800000u
                          ? static_cast<uint16_t>((u >> 16) | 0x40u)
                          : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      return put(bits);
    }
    case DType::Int8:
      return put(static_cast<int8_t>(s.i));
    case DType::UInt8:
      return put(static_cast<uint8_t>(s.i));
    case DType::Bool:
      return put(static_cast<uint8_t>(s.i != 0));
    case DType::Int16:
      return put(static_cast<int16_t>(s.i));
    case DType::Int32:
      return put(static_cast<int32_t>(s.i));
    case DType::Int64:
      return put(s.i);
    case DType::Float16:
      break;
  }
  ADD_FAILURE() << "kernel_runner: unsupported dtype " << loop::dtype_name(t);
}

inline loop::Scalar unpack(loop::DType t, const unsigned char* p) {
  using loop::DType;
  using loop::Scalar;
  auto get = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t) {
    case DType::Float32:
      return Scalar::of_float(t, get(float{}));
    case DType::Float64:
      return Scalar::of_float(t, get(double{}));
    case DType::BFloat16: {
      uint32_t u = static_cast<uint32_t>(get(uint16_t{})) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return Scalar::of_float(t, f);
    }
    case DType::Int8:
      return Scalar::of_int(t, get(int8_t{}));
    case DType::UInt8:
      return Scalar::of_int(t, get(uint8_t{}));
    case DType::Bool:
      return Scalar::of_int(t, get(uint8_t{}) != 0);
    case DType::Int16:
      return Scalar::of_int(t, get(int16_t{}));
    case DType::Int32:
      return Scalar::of_int(t, get(int32_t{}));
    case DType::Int64:
      return Scalar::of_int(t, get(int64_t{}));
    case DType::Float16:
      break;
  }
  ADD_FAILURE() << "kernel_runner: unsupported dtype " << loop::dtype_name(t);
  return {};
}

/// Compiles `k` and runs it on `buffers` (every parameter present, at least its extent long);
/// outputs are written back into `buffers`.
inline void run_compiled(const loop::Kernel& k, const loop::Bindings& sizes,
                         loop::BufferMap& buffers) {
  std::string src = emit_cpp(k);
  auto lib = runtime::compile_and_load(src, runtime::HostCompileOptions::from());
  using KernelFn = void (*)(void* const*, const int64_t*);
  auto fn = reinterpret_cast<KernelFn>(lib->symbol(cpp_kernel_symbol(k.name)));
  std::vector<std::vector<unsigned char>> memory(k.buffers.size());
  std::vector<void*> ptrs;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const loop::BufferParam& b = k.buffers[i];
    const std::vector<loop::Scalar>& vals = buffers[b.name];
    size_t bytes = element_bytes(b.dtype);
    memory[i].assign(std::max<size_t>(1, vals.size()) * bytes, 0);
    for (size_t j = 0; j < vals.size(); ++j) pack(b.dtype, vals[j], &memory[i][j * bytes]);
    ptrs.push_back(memory[i].data());
  }
  std::vector<int64_t> size_values;
  for (const std::string& s : k.size_vars) size_values.push_back(sizes.at(s));
  fn(ptrs.data(), size_values.data());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const loop::BufferParam& b = k.buffers[i];
    if (b.role == loop::BufferRole::Input) continue;
    std::vector<loop::Scalar>& vals = buffers[b.name];
    size_t bytes = element_bytes(b.dtype);
    for (size_t j = 0; j < vals.size(); ++j) vals[j] = unpack(b.dtype, &memory[i][j * bytes]);
  }
}

/// Random contents for every buffer of `k`: normal floats (times `scale`), small integers,
/// random bools; outputs zero-filled.
inline loop::BufferMap random_buffers(const loop::Kernel& k, const loop::Bindings& sizes,
                                      uint32_t seed = 1234, double scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  loop::BufferMap bufs;
  for (const loop::BufferParam& b : k.buffers) {
    int64_t n = buffer_extent(b, sizes);
    std::vector<loop::Scalar>& vals = bufs[b.name];
    for (int64_t j = 0; j < n; ++j) {
      double v = b.role == loop::BufferRole::Input ? normal(rng) : 0;
      if (loop::is_float(b.dtype)) {
        vals.push_back(loop::Scalar::of_float(b.dtype, v * scale));
      } else if (b.dtype == loop::DType::Bool) {
        vals.push_back(loop::Scalar::of_int(b.dtype, v > 0.5));
      } else {
        vals.push_back(loop::Scalar::of_int(b.dtype, static_cast<int64_t>(v * 10)));
      }
    }
  }
  return bufs;
}

/// Runs `k` compiled and through the interpreter on the same `inputs` (random_buffers when
/// empty); asserts every output element agrees: floats within `tol` relative (NaN == NaN, equal
/// infinities), integers exactly.
inline void check_against_interpreter(const loop::Kernel& k, const loop::Bindings& sizes,
                                      double tol, loop::BufferMap inputs = {}) {
  if (inputs.empty()) inputs = random_buffers(k, sizes);
  loop::BufferMap ref = inputs;
  loop::BufferMap got = inputs;
  run_compiled(k, sizes, got);
  loop::run_kernel(k, sizes, ref);
  for (const loop::BufferParam& b : k.buffers) {
    if (b.role == loop::BufferRole::Input) continue;
    const std::vector<loop::Scalar>& want = ref[b.name];
    const std::vector<loop::Scalar>& have = got[b.name];
    ASSERT_EQ(want.size(), have.size()) << b.name;
    for (size_t j = 0; j < want.size(); ++j) {
      double w = want[j].as_double(), h = have[j].as_double();
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(h)) << b.name << "[" << j << "] = " << h << ", want NaN";
      } else if (std::isinf(w)) {
        EXPECT_EQ(h, w) << b.name << "[" << j << "]";
      } else {
        EXPECT_NEAR(h, w, tol * (1 + std::fabs(w))) << b.name << "[" << j << "]";
      }
    }
  }
}

}  // namespace ember::codegen::testing
