/// \file
/// Compiles generated C++ into shared objects with the system compiler and loads them with dlopen,
/// through an on-disk cache: a second process that needs the same source compiles nothing.
///
/// Plain C++ (no torch). The cache key is the hash of the source, the compiler's identity
/// (path and `--version` output), the flags, the CPU's features (what -march=native means),
/// ember's version and the caller's key parts (torch's version). The cache is
/// `<cache_root()>/kernels`, a trusted store (kernel_cache.h): private to this user, entries
/// published whole with a checked sidecar, corrupted ones rebuilt, its size capped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/options.h"

namespace ember::runtime {

struct HostCompileOptions {
  /// The compiler (CompileOptions::Codegen::cxx).
  std::string compiler;
  /// Flags besides `-shared -fPIC -o`: no unsafe fast-math (see docs/design/host_compiler.md).
  /// `-ffp-contract=off`: no fused multiply-adds the IR did not ask for (they change results).
  /// `-mno-red-zone`: gcc 12 with AVX-512 (`-march=native` on such a CPU) placed a kernel's
  /// stack accumulator (`float acc[20]`) in the red zone 8 bytes off the 16-byte alignment its
  /// `vmovdqa` stores need: a segfault in test_im2col. Without the red zone the frame is aligned.
  /// `-fno-loop-unroll-and-jam`: gcc 12's -O3 unroll-and-jam of column-tile reductions (an
  /// outer loop over rows around `omp simd` loops over a tile of columns) took minutes per unit
  /// (docs/design/host_compiler.md).
  std::vector<std::string> flags = {
      "-O3",        "-fno-loop-unroll-and-jam", "-march=native",     "-fopenmp",
      "-std=c++17", "-fno-math-errno",          "-ffp-contract=off", "-mno-red-zone"};
  /// Flags after the source file (libraries to link).
  std::vector<std::string> link_flags;
  /// More that the cache key covers (the executor adds torch's version).
  std::vector<std::string> key_parts;
  /// A header every source starts with (the generated code's prelude), or empty. A source that
  /// starts with it is compiled as the rest of its text with the prelude included from a header
  /// precompiled once per prelude, compiler and flags (in the cache directory): parsing the
  /// standard headers is most of the time of compiling a few small kernels. The cache key is
  /// still the whole source's. Precompiled preludes live in prelude_dir() (kernel_cache.h), else
  /// the cache directory's `prelude/`.
  std::string prelude;

  /// Options with the compiler of `codegen`, and glibc's vector math library (libmvec) when
  /// `codegen.libmvec` and it is usable: then `-DEMBER_LIBMVEC` and `-lmvec`, and the prelude
  /// lets vectorized loops call libmvec's versions of exp, log, tanh, erf, ... (see
  /// docs/design/host_compiler.md).
  static HostCompileOptions from(const CompileOptions::Codegen& codegen = {});
};

/// A loaded shared object. It stays loaded until the process exits (see the .cpp for why).
class KernelLibrary {
 public:
  KernelLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  /// The address of `name` (an `extern "C"` symbol). Throws InternalError when absent.
  void* symbol(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_;
  std::string path_;
};

/// Counters for tests and reports.
struct HostCompilerStats {
  int64_t compiles = 0;     ///< compiler invocations
  int64_t disk_hits = 0;    ///< loaded from the on-disk cache
  int64_t memory_hits = 0;  ///< already loaded in this process
};

/// True on x86-64 with glibc >= 2.35 (libmvec with tanh, erf, expm1, ...) and a linkable
/// libmvec.so (HostCompileOptions::from also asks CompileOptions::Codegen::libmvec).
bool libmvec_usable();

/// The kernel cache directory, `<cache_root()>/kernels` (kernel_cache.h), created if missing.
std::string cache_dir();

/// The key under which `source` compiled with `options` is cached (hex).
std::string cache_key(const std::string& source, const HostCompileOptions& options);

/// Compiles (or finds in a cache) and loads `source`. Throws Unsupported with the compiler's
/// output when compilation fails.
std::shared_ptr<KernelLibrary> compile_and_load(const std::string& source,
                                                const HostCompileOptions& options);

/// Compiles several sources in parallel (one compiler process per source, up to the number of
/// hardware threads at a time) and loads them, in order.
std::vector<std::shared_ptr<KernelLibrary>> compile_and_load_all(
    const std::vector<std::string>& sources, const HostCompileOptions& options);

HostCompilerStats host_compiler_stats();
/// Forgets the in-process cache (libraries stay loaded while referenced); for tests.
void clear_memory_cache();

}  // namespace ember::runtime
