/// \file
/// CompileOptions: every knob of ember's compilation, as one typed object.
///
/// It is filled once, at the Python boundary (src/python/options.cpp, from `ember.config`,
/// which reads the EMBER_* environment variables and takes `ember.config.patch(...)` and
/// `options=` overrides), and handed down: a TraceSession, an Executor and a CompiledFunction
/// each hold a copy, and each stage reads its group from there. No stage below the boundary reads
/// the environment (a CI check: `grep getenv src/`), so the same graph and options give the same
/// schedule and byte-identical kernels, and a test sets an option without touching process state.
///
/// The defaults here are ember's defaults; docs/env_vars.md lists each field's variable. Where the
/// caches live (EMBER_CACHE_DIR, ...) is not a compile option but the process's: the boundary
/// passes it to runtime::configure_cache (runtime/kernel_cache.h).
#pragma once

#include <cstdint>
#include <string>

namespace ember {

struct CompileOptions {
  /// Capture (src/capture): read by the frame hook, which python/ember/capture.py configures.
  struct Capture {
    /// Most compiled entries per code object of one ember.compile. (EMBER_CACHE_SIZE_LIMIT)
    int cache_size_limit = 8;
    /// Comma list of what capture logs: recompiles, graph_breaks, guards, graph, all.
    /// (EMBER_LOGS)
    std::string logs;
  };

  /// Trace-time rewrites (src/tracer): choices eager makes on CUDA, made while recording.
  struct Trace {
    /// The CUDA-only split reductions (split_reduction.h), log-softmax as `x - logsumexp(x)`
    /// (log_softmax_rewrite.h) and max-pool window offsets (pool_offsets.h) on every device:
    /// the CPU tests compare them with eager. (EMBER_SPLIT_REDUCTIONS=all)
    bool splits_everywhere = false;
    /// Every backward decomposition of decompose_backward.h on every device, and the batch-norm
    /// backward as sums. (EMBER_DECOMPOSE_BACKWARD=all)
    bool decompose_backward_everywhere = false;
    /// Training batch norm on CUDA (batch_norm_rewrite.h): Stats, cuDNN's statistics and
    /// ember's normalization; Keep, cuDNN's output; Off, native_batch_norm split into sums.
    /// (EMBER_CUDNN_BATCH_NORM=stats|1|0)
    enum class CudnnBatchNorm { Stats, Keep, Off };
    CudnnBatchNorm cudnn_batch_norm = CudnnBatchNorm::Stats;
    /// Rewrites of rewrite/rewrites.h turned off, by name (a comma list): for each rewrite's
    /// before/after test, and to measure what one gains. (EMBER_DISABLED_REWRITES)
    std::string disabled_rewrites;
    /// 1x1 convolutions on CUDA as matrix products (rewrite/conv_as_product.h; off: Note
    /// [Pointwise convolutions as products, measured] there). (EMBER_CONV1X1_AS_MM)
    bool pointwise_convolutions_as_products = false;
  };

  /// The scheduler (src/sched): what becomes a generated kernel.
  struct Sched {
    /// Generated kernels at all; off, every node is an ATen call. (EMBER_CODEGEN)
    bool codegen = true;
    /// Kernels for reductions (softmax, norms, sums, ...). (EMBER_REDUCTION_KERNELS)
    bool reductions = true;
    /// Reduction kernels with prologues and epilogues. (EMBER_REDUCTION_FUSION)
    bool reduction_fusion = true;
    /// Independent pointwise kernels as one combo kernel (sched/combo.h). (EMBER_COMBO_KERNELS)
    bool combo_kernels = true;
    /// A reduction kernel stores the open pointwise values its prologue reads (Note [Stored
    /// prologues], sched/fusion.cpp). (EMBER_STORED_PROLOGUES)
    bool stored_prologues = true;
    /// Depthwise convolutions computed in the kernels that read them, on Triton graphs
    /// (sched/depthwise_conv.h; off: Note [Depthwise kernels, measured] there).
    /// (EMBER_DEPTHWISE_KERNELS)
    bool depthwise_convolutions = false;
    /// Plans read from and written to the on-disk plan cache (runtime/plan_cache.h).
    /// (EMBER_PLAN_CACHE)
    bool plan_cache = true;
    /// Only plans that took at least this long to schedule are cached: reading a small graph's
    /// plan back costs about what scheduling it does. (EMBER_PLAN_CACHE_MIN_SECONDS)
    double plan_cache_min_seconds = 0.05;
  };

  /// Generated C++ and the host compiler (src/codegen/cpp, runtime/host_compiler.h).
  struct Codegen {
    /// The host compiler. (EMBER_CXX, else CXX, else c++)
    std::string cxx = "c++";
    /// Vector loops call glibc's libmvec where it is usable. (EMBER_LIBMVEC)
    bool libmvec = true;
  };

  /// Generated Triton kernels (src/codegen/triton, runtime/triton_runtime.h).
  struct Triton {
    /// Graphs on one CUDA device get Triton kernels. (EMBER_TRITON)
    bool enabled = true;
    /// CPU graphs run Triton kernels in Triton's interpreter (tests). (EMBER_TRITON_INTERPRET)
    bool interpret = false;
    /// Kernels over 2M elements time their candidate launch configurations at the first launch.
    /// (EMBER_TRITON_AUTOTUNE)
    bool autotune = true;
    /// Their candidates other than the default compile in the background, timed at a launch after
    /// they are done (Note [Candidates compiled in the background]); not with cuda_graphs.
    /// (EMBER_TRITON_BACKGROUND_TUNING)
    bool background_tuning = true;
    /// Row programs hold a whole row in one block where it fits. (EMBER_TRITON_PERSISTENT)
    bool persistent = true;
    /// Buffer pointers are declared multiples of 16 bytes, so loads and stores are vectorized
    /// (Note [Buffers aligned to 16 bytes]). (EMBER_TRITON_ALIGNED)
    bool aligned_pointers = true;
  };

  /// The compiled program (src/runtime).
  struct Runtime {
    /// Nodes that depend on no input run once, at compile time (runtime/constant_fold.h).
    bool fold_constants = true;
    /// mode="reduce-overhead": replay a graph on one CUDA device as a CUDA graph.
    bool cuda_graphs = false;
    /// mode="max-autotune": Triton templates for matrix products, timed against cuBLAS.
    bool matmul_templates = false;
    /// Products of at most this many multiply-adds (batch * m * n * k) on a CUDA device get the
    /// templates in every mode but reduce-overhead, and 1x1 convolutions of that size in
    /// inference become such products: launch-bound sizes, whose device time is below a cuBLAS
    /// or cuDNN call's host time (Note [Launch-bound products], runtime/executor_matmul.cpp).
    /// 0: off. (EMBER_LAUNCH_BOUND_PRODUCTS)
    int64_t launch_bound_products = int64_t{1} << 29;
    /// Eager attention as one SDPA call: -1 on CUDA graphs with Triton kernels and on CPU graphs
    /// over shape symbols, 0 never, 1 on any kernel graph. (EMBER_FUSE_ATTENTION unset|0|1)
    int fuse_attention = -1;
    /// A product's bias added by the pointwise kernel that reads it, on Triton graphs
    /// (runtime/bias_apart.h; off: Note [Biases apart, measured] there). (EMBER_BIAS_APART)
    bool bias_apart = false;
    /// Kernels of parameters only keep their outputs across calls. (EMBER_PARAMETER_CACHE)
    bool parameter_cache = true;
  };

  /// Training graphs (runtime/compiled_function.h, graph/partition.h).
  struct Training {
    /// The min-cut partition, recomputing cheap values in the backward. (EMBER_MIN_CUT)
    bool min_cut = true;
    /// Note [Values the backward writes anyway are saved]. (EMBER_SAVE_MATERIALIZED)
    bool save_materialized = true;
  };

  /// Checks and reports for finding bugs; slow.
  struct Debug {
    /// Every call also runs the unfused program and compares each kernel's outputs with it.
    /// (EMBER_VERIFY_KERNELS)
    bool verify_kernels = false;
    /// Each run prints the bytes its values hold: 1 around the peak, 2 every step.
    /// (EMBER_DEBUG_LIVE)
    int live_bytes = 0;
    /// Each pipeline step that changes the graph prints it to stderr (runtime/pipeline.h).
    /// (EMBER_DUMP_PIPELINE)
    bool dump_pipeline = false;
    /// Each run sums its host time per kind of step (kernel launches, ATen calls, views) and
    /// as a whole into process totals: ember._C.host_step_times() (runtime/host_times.h).
    /// (EMBER_HOST_STEP_TIMES)
    bool host_step_times = false;
  };

  Capture capture;
  Trace trace;
  Sched sched;
  Codegen codegen;
  Triton triton;
  Runtime runtime;
  Training training;
  Debug debug;
};

}  // namespace ember
