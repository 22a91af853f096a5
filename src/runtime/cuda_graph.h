/// \file
/// mode="reduce-overhead": a compiled graph on one CUDA device is captured into a CUDA graph and
/// replayed, as Inductor's cudagraphs do: one launch per call instead of one per kernel and ATen
/// call.
///
/// The first call runs the graph's program as usual (it compiles and loads what is loaded lazily:
/// Triton modules, cuBLAS handles). The second captures the program into a CUDA graph through a
/// hook the Python package installs (ember/_cudagraphs.py: torch.cuda.graph, which captures on a
/// side stream into a private memory pool of torch's caching allocator), on static copies of the
/// inputs. From then on a call copies its inputs into the static ones (module state, parameters
/// and registered buffers, is read in place, as Inductor's cudagraph trees treat it: copies of
/// batch-norm statistics per call cost more than a replay; docs/design/executor.md), replays the
/// graph with cuGraphLaunch (libcuda, from C++, on the current stream) and returns copies of the
/// static outputs, so that a later replay cannot overwrite what a caller holds. A graph whose
/// capture fails, or whose outputs alias its inputs, runs without a CUDA graph, with the reason in
/// a warning and in disabled_reason().
///
/// Note [Parameter kernels outside the replay]: kernels of parameters only (autocast's weight
/// casts, pipeline.h: mark_parameter_kernels) keep their outputs across calls. The warm-up call
/// fills that cache, so the capture finds their outputs there and records no launch of them: a
/// replay reads the cached tensors (kept alive by the cache) and runs no weight cast, where eager
/// and Inductor's cudagraphs cast every weight on every call. A replay is valid while those
/// parameters keep the versions it last saw: each call compares them (a version counter read per
/// input), and one that finds a change (an in-place update of a weight or a statistic, an
/// optimizer's step between inference calls) runs the program instead, which computes those
/// kernels again and, under a CUDA graph, writes their results into the cached tensors the graph
/// reads (executor_run.cpp); the next call replays again, with no new capture.
///
/// A graph over shape symbols (issue 35) records one CUDA graph per binding of its symbols, as
/// Inductor's CUDA graph trees record one per distinct size: each size has its warm-up call, its
/// capture and its own static inputs and outputs. Past kMaxCudaGraphSizes sizes, calls of a new
/// size run without one.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ember::runtime {

/// A captured, instantiated CUDA graph and what keeps it (and the memory pool its tensors live
/// in) alive: the Python torch.cuda.CUDAGraph.
struct CapturedCudaGraph {
  void* exec = nullptr;  ///< cudaGraphExec_t
  std::shared_ptr<void> owner;
};

/// Runs `body` under stream capture on CUDA device `device` and returns the instantiated graph;
/// throws what `body` or the capture throws. Installed by ember._cudagraphs
/// (ember._C.set_cuda_graph_hook).
using CudaGraphHook =
    std::function<CapturedCudaGraph(int device, const std::function<void()>& body)>;
void set_cuda_graph_hook(CudaGraphHook hook);

/// Replays of CUDA graphs in this process (all runners): for tests.
int64_t cuda_graph_replays_total();

/// The sizes (bindings of a graph's symbols) a CudaGraphRunner records graphs for, at most.
constexpr size_t kMaxCudaGraphSizes = 32;
/// Captures again because module state moved to new memory, at most (all bindings together).
constexpr int64_t kMaxCudaGraphRecaptures = 8;

/// The CUDA graphs of one compiled graph (see the file comment).
class CudaGraphRunner {
 public:
  using Program = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

  /// `module_state[i]`: input i is a parameter or a registered buffer, which replays read in
  /// place. A call that passes another tensor there (a buffer reassigned, parameters replaced)
  /// captures that binding's graph again, at most kMaxCudaGraphRecaptures times; past that the
  /// graph runs without a CUDA graph, with a warning. `versioned[i]`: input i is read by a kernel
  /// of parameters only, whose outputs the capture took from the parameter cache instead of
  /// recording the kernel (Note [Parameter kernels outside the replay]): a call that finds the
  /// input's version changed runs the program (which computes them again into the tensors the
  /// graph reads), and the calls after it replay.
  CudaGraphRunner(int device, std::vector<bool> module_state, std::vector<bool> versioned = {});
  ~CudaGraphRunner();

  /// The outputs for `inputs` from a replay of the graph of binding `symbols` (the values of
  /// the graph's symbols; empty for a static graph), capturing it first on that binding's second
  /// call; nullopt when the caller must run `program` itself (the warm-up call, a call the graph
  /// cannot serve, a size past kMaxCudaGraphSizes, or a graph that could not be captured).
  std::optional<std::vector<at::Tensor>> run(const std::vector<at::Tensor>& inputs,
                                             const Program& program,
                                             const std::vector<int64_t>& symbols = {});

  /// Why the graph runs without a CUDA graph; empty while it is captured or still to be.
  std::string disabled_reason() const;
  int64_t replays() const;
  /// Captures made again because module state moved (see the constructor).
  int64_t recaptures() const;

 private:
  /// One binding's graph.
  struct Entry {
    int64_t calls = 0;
    std::vector<at::Tensor> static_inputs, static_outputs;
    std::vector<uint32_t> versions;  ///< of the versioned inputs the cached outputs are for
    CapturedCudaGraph graph;
  };
  bool capture(Entry& e, const std::vector<at::Tensor>& inputs, const Program& program);
  void disable(const std::string& why);

  const int device_;
  const std::vector<bool> module_state_;
  const std::vector<bool> versioned_;
  mutable std::mutex mu_;
  int64_t replays_ = 0;
  int64_t recaptures_ = 0;
  std::string disabled_;
  std::map<std::vector<int64_t>, Entry> entries_;
  bool warned_full_ = false;
};

}  // namespace ember::runtime
