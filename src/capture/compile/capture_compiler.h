/// \file
/// ember's FrameCompiler: captures a whole frame with the symbolic interpreter, traces it into a
/// graph, compiles that graph (with ember's Executor, or with a foreign backend: graph_runner.h),
/// and returns a CompiledFrame guarded by what the capture read. A frame it cannot capture whole
/// runs eagerly (this slice has no graph breaks): the reason is logged and counted, and the code
/// object is not tried again.
#pragma once

#include <Python.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include <unordered_map>
#include <unordered_set>

#include "capture/guards/guards.h"
#include "capture/hook/frame_hook.h"
#include "runtime/executor.h"

namespace ember::capture {

struct CaptureOptions {
  bool fullgraph = false;  ///< an unsupported frame raises ember.Unsupported instead
  runtime::ExecutorOptions executor;
  /// A foreign backend (torch's convention, graph_runner.h) that compiles every graph instead of
  /// ember's Executor; unset: the Executor.
  nanobind::object backend;
  std::vector<std::string> library_prefixes;  ///< code that runs for real, not inlined
  /// torch.compile's `dynamic=`: true, every dim of a user tensor input is a shape symbol;
  /// false, none is; unset (automatic dynamic), a dim becomes one once a recompile of the frame
  /// sees its size changed (and dims torch._dynamo.mark_dynamic marked). mark_static'd dims are
  /// never symbols. Parameters and buffers keep static shapes.
  std::optional<bool> dynamic;
};

/// What the capture did, for ember.metrics and ember.explain.
struct CaptureRecord {
  std::string code;          ///< "file:line (name)" of the frame
  bool captured = false;     ///< a graph was made (the whole frame, or up to a graph break)
  bool graph_break = false;  ///< the graph ends at a break; the rest runs in a resume function
  std::string reason;        ///< why the frame runs eagerly, or why it breaks
  int nodes = 0;
  int kernels = 0;
  int extern_steps = 0;
  int view_steps = 0;         ///< views made straight from their root's storage
  int fused_nodes = 0;        ///< nodes computed inside generated kernels
  int folded_nodes = 0;       ///< nodes of parameters folded to constants
  bool symbolic = false;      ///< the graph has shape symbols (one graph for many sizes)
  int parameter_kernels = 0;  ///< kernels of parameters and buffers only, kept across calls
  int fused_attention = 0;    ///< eager attention run as one SDPA call (runtime/attention_fusion.h)
  int causal_attention = 0;   ///< constant causal masks made is_causal (runtime/causal_attention.h)
  std::string symbolic_fallback;  ///< a symbolic graph compiled per size instead: why
  bool training = false;  ///< a joint graph: its outputs' grad_fn runs the compiled backward
  /// Kernels ember's code generator did not generate, and why (GraphRunner::codegen_notes).
  std::vector<std::string> codegen_notes;
  int guards = 0;
  int inputs = 0;
  double seconds = 0;          ///< the whole compile
  double capture_seconds = 0;  ///< the interpreter's run(s) over the bytecode (the trace)
  /// Seconds per step of the compile pipeline (GraphRunner::step_seconds).
  std::vector<std::pair<std::string, double>> step_seconds;
  std::string graph;       ///< the graph, printed
  std::string guard_text;  ///< the guards, one per line
  /// The generated kernels' source (a training graph's forward ones, then its backward's).
  std::vector<std::string> kernel_sources;
};

/// Every compile of one compiler, in order. Shared with ember.metrics, which reads it after the
/// compiler is gone: a compiler lives as long as its compiled function, no longer.
struct CaptureLog {
  std::vector<CaptureRecord> records;
};

class CaptureCompiler final : public FrameCompiler {
 public:
  explicit CaptureCompiler(CaptureOptions options) : options_(std::move(options)) {}
  /// Compiles the frame (compile_once); when shape symbols made it break or run eagerly where
  /// static shapes might not, the frame keeps static shapes from then on and compiles again.
  CompileResult compile(const FrameView& f) override;
  bool fullgraph() const override { return options_.fullgraph; }
  /// eager_memo_ under the current global state.
  std::optional<CompileResult::Action> decided(const FrameView& f) override;

  /// Every compile of this compiler, in order.
  const std::vector<CaptureRecord>& records() const { return log_->records; }
  const std::shared_ptr<CaptureLog>& log() const { return log_; }

  /// Sets the Python error for a C++ exception (ember's error types); installed by the bindings.
  using ErrorSetter = void (*)(const std::exception_ptr&);
  static void set_error_setter(ErrorSetter s);

 private:
  /// Whether anything of torch reaches frame `f`: a global of its code that is a torch module,
  /// or a tensor or nn.Module among its arguments and closure variables (in lists, tuples and
  /// dicts too). Frames it reaches not are left to run as they are.
  bool touches_torch(const FrameView& f);

  CaptureOptions options_;
  /// Per code object: the globals dict it was checked with, and whether a global it names is
  /// torch or one of torch's modules.
  std::unordered_map<PyObject*, std::pair<PyObject*, bool>> torch_globals_;
  std::shared_ptr<CaptureLog> log_ = std::make_shared<CaptureLog>();
  /// Code objects this compiler runs eagerly, with the global state that decided it.
  std::unordered_map<PyObject*, GlobalState> eager_memo_;
  /// Code objects of eager_memo_ whose callees run unhooked too (RunsUnhooked).
  std::unordered_set<PyObject*> unhooked_;
  std::vector<nanobind::object> memo_keepalive_;
  /// Automatic dynamic: per code object and tensor source name, the sizes seen when compiling
  /// it, and the dims seen changing (shape symbols from then on).
  struct SeenSizes {
    std::vector<int64_t> sizes;
    std::vector<bool> changed;
  };
  std::unordered_map<PyObject*, std::unordered_map<std::string, SeenSizes>> seen_sizes_;
  /// The dims of tensor input `t` (source `name`, of frame `code`) that become shape symbols.
  std::vector<int64_t> dynamic_dims(PyObject* code, const std::string& name, const at::Tensor& t,
                                    graph::InputKind kind);
  CompileResult compile_once(const FrameView& f);
  /// Set by dynamic_dims when it made a dim symbolic during the current compile.
  bool used_dynamic_ = false;
  /// Set while a frame is captured again without DDP bucket boundaries (one could not be a graph
  /// break: Note [DDP bucket boundaries]).
  bool ddp_boundaries_off_ = false;
  /// Code objects whose symbolic compile failed: static shapes for them from then on.
  std::unordered_set<PyObject*> static_codes_;
};

}  // namespace ember::capture
