/// \file
/// Emits a loop-IR Kernel as one C++ translation unit for the host compiler (the CPU backend).
///
/// The emitted function has a uniform ABI, so the runtime calls every kernel the same way:
///
///   extern "C" void <kernel name>(void* const* buffers, const int64_t* sizes);
///
/// `buffers` are the kernel's buffer parameters in order (element pointers), `sizes` the values of
/// its size variables in order.
///
/// Semantics kept from expr.h: no fast-math (the host compiler is never given it), NaN-propagating
/// min/max, Python floor division and modulo, bf16 and f16 arithmetic computed in f32 and rounded
/// at every node. Loop kinds map to `#pragma omp parallel for` (only when no other iteration can
/// touch an accumulator this one updates, see parallel_safe in the .cpp), `#pragma omp simd` and
/// `#pragma GCC unroll`. The output is deterministic: the same Kernel gives the same bytes.
#pragma once

#include <string>
#include <vector>

#include "loop/stmt.h"

namespace ember::codegen {

/// The C++ source of `k`. Throws Unsupported for what the emitter cannot express (f16 on a
/// compiler without _Float16 is the compiler's error, not ours).
std::string emit_cpp(const loop::Kernel& k);

/// One translation unit holding the prelude once and every kernel of `kernels` (their names must
/// differ). Compiling a graph's kernels in a few units instead of one each saves the compiler's
/// start-up and header parsing, the larger part of compiling small kernels.
std::string emit_cpp_unit(const std::vector<loop::Kernel>& kernels);

/// The text every source of emit_cpp / emit_cpp_unit starts with (headers and helpers): the host
/// compiler precompiles it once (HostCompileOptions::prelude).
std::string cpp_prelude();

/// The C++ identifier the emitter uses for a kernel named `name`.
std::string cpp_kernel_symbol(const std::string& name);

}  // namespace ember::codegen
