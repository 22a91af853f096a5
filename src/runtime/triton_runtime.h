/// \file
/// Running generated Triton kernels (codegen/triton/triton_emitter.h;
/// docs/design/triton_codegen.md).
///
/// Compilation is Triton's own compiler, in process, through a hook the Python package installs
/// (ember/_triton.py): C++ hands it the module source and the signature and gets a cubin back.
/// The cubin is loaded through the CUDA driver API of a dlopen'd libcuda (building ember needs no
/// CUDA), and each launch is a cuLaunchKernel from C++ on the device's current torch stream, with
/// tensors from torch's caching allocator: no Python per launch.
///
/// Without a GPU, a second hook runs the kernel in Triton's interpreter on CPU tensors (one Python
/// call per launch): tests use it to run the executor's Triton path in CI.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/triton/triton_configs.h"
#include "codegen/triton/triton_emitter.h"

namespace ember::runtime {

struct BackgroundCompile;

/// When a large kernel's candidate launch configurations are compiled and timed
/// (CompileOptions::Triton::autotune and ::background_tuning).
enum class TritonTuning {
  Off,          ///< the default configuration only
  FirstLaunch,  ///< all compiled with the kernel; timed at its first launch
  Background,   ///< the default compiled with the kernel, the others in the background
                ///< (triton_background.h); timed at its first launch after they are done
};

/// What Triton's compiler produced for one kernel.
struct TritonBinary {
  std::string cubin;
  std::string symbol;  ///< the kernel's name in the cubin
  int num_warps = 4;
  int shared_bytes = 0;
  int global_scratch_bytes = 0;  ///< per program
  int global_scratch_align = 1;
  int profile_scratch_bytes = 0;
  /// Set instead of the rest when Triton's compiler refused the kernel: its message.
  std::string error;
};

/// One kernel for the compile hook.
struct TritonCompileJob {
  std::string source;  ///< the module
  std::string name;    ///< its @triton.jit function
  /// Triton's type names per argument, "constexpr" for the block size.
  std::vector<std::string> signature;
  /// The block size's parameter name, or several constexprs and launch options spelled
  /// "NAME=value,..." (named_constexprs), `num_stages=s` among them (row tiles, the
  /// matrix-product templates; `block` unused).
  std::string block_param;
  int block = 16;
  int num_warps = 4;
  int device = 0;  ///< CUDA device index
};

/// The hooks the Python package installs (ember._C.set_triton_hooks).
struct TritonHooks {
  /// Jobs -> one binary per job, in order (the hook may compile them in parallel). `background`:
  /// called from the background thread (triton_background.h), whose compiles yield the compile
  /// pool's workers to a first call's.
  std::function<std::vector<TritonBinary>(const std::vector<TritonCompileJob>&, bool background)>
      compile;
  /// (module source, function name, programs, block parameter, block size, tensor arguments,
  /// integer arguments after them): runs the kernel in Triton's interpreter.
  std::function<void(const std::string&, const std::string&, int64_t, const std::string&, int,
                     const std::vector<at::Tensor>&, const std::vector<int64_t>&)>
      interpret;
};
void set_triton_hooks(TritonHooks hooks);
const TritonHooks& triton_hooks();

/// Several constexprs (and launch options) in one TritonCompileJob::block_param, and for the
/// interpret hook: "NAME=value,...", in order.
std::string named_constexprs(const std::vector<std::pair<std::string, int64_t>>& values);

/// Triton's name for the element type of a pointer to `t` ("*fp32", "*bf16", ...), with ":16"
/// when `aligned`: the buffer's address is a multiple of 16 bytes (Note [Buffers aligned to 16
/// bytes]).
std::string triton_pointer_type(at::ScalarType t, bool aligned = true);

/// Whether every defined buffer's data pointer is a multiple of 16 bytes, as the kernels assume.
bool buffers_aligned(const std::vector<at::Tensor>& buffers);
/// Runs `launch` on `buffers` with each one whose address is not a multiple of 16 bytes replaced
/// by a copy at an aligned address (the bytes its layout spans, with its sizes and strides); the
/// copies of the buffers `written` names (written[i]: the kernel may write buffers[i]) are
/// copied back after. Note [Buffers aligned to 16 bytes].
void launch_realigned(const std::vector<at::Tensor>& buffers, const std::vector<bool>& written,
                      const std::function<void(const std::vector<at::Tensor>&)>& launch);

struct LoadedTritonKernel;

/// One generated kernel, ready to launch. A kernel over shape symbols (TritonKernel's source
/// takes them as i64 arguments after its buffers, loop::Kernel::size_vars) is compiled once, its
/// block size chosen at the symbols' hints, and launched on a grid computed from each call's sizes
/// (Note [Symbolic Triton kernels]).
class TritonLaunchable {
 public:
  /// Compiles the kernels `ks` for the CUDA device `device` (buffer_types[i] is ks[i]'s) in one
  /// call of the compile hook, and loads them. Kernels with the same source and signature are
  /// compiled and loaded once, and a kernel this process has already loaded (and still holds) is
  /// not compiled again. A kernel Triton's compiler refuses is a nullptr, with the compiler's
  /// message in (*errors)[i]. `tuning`: whether and when large kernels compile and time their
  /// candidate launch configurations. `hints[i]` (empty, or one per
  /// kernel) binds ks[i]'s size variables to the values its launch configuration is chosen for;
  /// a kernel with size variables launches with that one configuration.
  static std::vector<std::unique_ptr<TritonLaunchable>> cuda_all(
      const std::vector<codegen::TritonKernel>& ks,
      const std::vector<std::vector<at::ScalarType>>& buffer_types, int device,
      std::vector<std::string>* errors, TritonTuning tuning = TritonTuning::FirstLaunch,
      const std::vector<loop::Bindings>& hints = {});
  /// Runs `k` in Triton's interpreter (through the interpret hook) on CPU tensors; `hint` as in
  /// cuda_all.
  static std::unique_ptr<TritonLaunchable> interpreted(const codegen::TritonKernel& k,
                                                       const loop::Bindings& hint = {});
  ~TritonLaunchable();

  /// Launches on the kernel's buffers, in order (inputs, then outputs). The first launch of a
  /// kernel with several configurations (codegen/triton_configs.h) times each on these buffers
  /// first and keeps the fastest (triton_tuning.h); buffers that share storage, or a stream
  /// capturing a CUDA graph, put the timing off to a later launch and use the default, as do
  /// candidates still compiling in the background.
  /// `sizes`: the values of the kernel's size variables (TritonKernel's kernel order), for a
  /// kernel over shape symbols.
  void launch(const std::vector<at::Tensor>& buffers, const std::vector<int64_t>& sizes = {}) const;

  const codegen::TritonKernel& kernel() const { return kernel_; }

 private:
  struct Candidate {
    codegen::TritonConfig config;
    int64_t programs = 1;
    std::shared_ptr<const LoadedTritonKernel> loaded;  ///< shared by identical kernels
  };
  TritonLaunchable() = default;
  void launch_with(const Candidate& c, const std::vector<at::Tensor>& buffers,
                   const std::vector<int64_t>& sizes) const;
  /// c's programs at `sizes` (its own for a kernel without size variables).
  int64_t programs(const Candidate& c, const std::vector<int64_t>& sizes) const;
  /// Times the candidates on `buffers` and keeps the fastest; false when it could not time.
  bool tune(const std::vector<at::Tensor>& buffers) const;
  /// Takes the candidates compiled in the background (loading them) once they are done; false
  /// while they are not, or while `stream` captures a CUDA graph (no module loads then).
  bool adopt_background(void* stream) const;

  codegen::TritonKernel kernel_;
  codegen::TritonLaunch launch_;  ///< the default configuration's (the interpreter's)
  bool interpret_ = false;
  int device_ = 0;
  std::string tune_key_;
  mutable std::mutex tune_mu_;
  /// The configurations compiled, the default first; one, the chosen one, once tuned.
  mutable std::vector<Candidate> candidates_;
  /// Candidates compiling in the background: the request, and per candidate its job there and
  /// its key in the loaded-module cache. Empty once taken.
  mutable std::shared_ptr<const BackgroundCompile> background_;
  struct Deferred {
    Candidate candidate;
    size_t job = 0;
    std::string key;
  };
  mutable std::vector<Deferred> deferred_;
  mutable std::atomic<bool> tuned_{false};
};

/// Kernels timed by autotuning in this process, and kernels whose winner came from the disk
/// cache: for tests.
struct TritonTuningStats {
  int64_t timed = 0;
  int64_t remembered = 0;
};
TritonTuningStats triton_tuning_stats();
/// Launches that copied a buffer to an aligned address first (launch_realigned): for tests.
int64_t num_realigned_launches();

/// Modules loaded by this process (identical kernels count once): for tests.
int64_t num_loaded_triton_modules();

/// Compiles `jobs` (one call of the compile hook; a module this process still holds is not
/// compiled again) and loads them on CUDA device `device`: one kernel per job, or nullptr with
/// the compiler's message in (*errors)[i]. For kernels other than the emitter's (the matrix-product
/// templates, runtime/matmul_template.h).
std::vector<std::shared_ptr<const LoadedTritonKernel>> load_triton_jobs(
    const std::vector<TritonCompileJob>& jobs, int device, std::vector<std::string>* errors);

/// Launches `k` on a grid of (grid_x, grid_y) programs with `pointers`, then `integers` (i64
/// arguments), as its arguments (Triton's scratch pointers are appended), on device `device`'s
/// current stream.
void launch_loaded(const LoadedTritonKernel& k, int64_t grid_x, int64_t grid_y,
                   std::vector<void*> pointers, int device,
                   const std::vector<int64_t>& integers = {});

}  // namespace ember::runtime
