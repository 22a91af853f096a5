/// \file
/// What runs a captured graph on each call of a compiled frame or graph segment: ember's
/// Executor, or the callable that a foreign backend returned for the graph exported as a
/// torch.fx.GraphModule (ember.compile(backend=...); fx_export.h).
///
/// A backend follows torch.compile's convention: `backend(gm, example_inputs)` with the
/// GraphModule and a list of the graph's inputs (real tensors, those of the call that compiled
/// the graph, in placeholder order) returns a callable; the callable takes the inputs as
/// positional tensors and returns a tuple or list with one tensor per graph output. The
/// GraphModule applies the graph's input mutations itself (its copy_ nodes).
#pragma once

#include <ATen/core/Tensor.h>
#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "runtime/compiled_function.h"
#include "runtime/executor.h"
#include "tracer/trace_session.h"

namespace ember::capture {

class GraphRunner {
 public:
  virtual ~GraphRunner() = default;

  /// Runs the graph on its non-constant inputs, in order: applies its input mutations and
  /// returns its outputs. Throws what the program's ops throw; nanobind::python_error for an
  /// exception of the backend's callable, UserError when it returns something else than the
  /// graph's outputs.
  virtual std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const = 0;
  /// The graph that runs (ember's: after constant folding).
  virtual const graph::Graph& graph() const = 0;
  /// Generated kernels and boxed ATen calls per run (0 for a foreign backend: not known).
  virtual int num_kernels() const { return 0; }
  virtual int num_extern_steps() const { return 0; }
  virtual int num_view_steps() const { return 0; }
  virtual int num_fused_nodes() const { return 0; }
  virtual int num_folded_nodes() const { return 0; }
  /// Kernels of parameters and buffers only, whose outputs are kept across calls.
  virtual int num_parameter_kernels() const { return 0; }
  virtual int num_fused_attention() const { return 0; }
  virtual int num_causal_attention() const { return 0; }
  /// A graph over shape symbols compiled per size instead: why (runtime::Program's
  /// symbolic_fallback), else "".
  virtual std::string symbolic_fallback() const { return ""; }
  /// Why kernels were not generated: each refused kernel, or why the whole graph runs unfused.
  virtual std::vector<std::string> codegen_notes() const { return {}; }
  /// A joint graph: the outputs' grad_fn runs its compiled backward (make_training_runner).
  virtual bool training() const { return false; }
  /// The generated kernels' source (a training graph's forward ones, then its backward's).
  virtual std::vector<std::string> kernel_sources() const { return {}; }
  /// Seconds per step of ember's compile pipeline (runtime::Program::step_seconds), then the
  /// parts of steps ("schedule/<phase>", Program::phase_seconds); a training graph's backward
  /// ones named "backward:<name>"; empty for a foreign backend.
  virtual std::vector<std::pair<std::string, double>> step_seconds() const { return {}; }

  bool has_mutations() const { return !graph().mutations.empty(); }
  /// The positions among run()'s inputs of the inputs the graph mutates.
  std::vector<size_t> mutated_input_positions() const;
  /// True when the graph mutates an input that overlaps another input in memory: the graph was
  /// traced assuming inputs do not alias, so such a call must run eagerly instead.
  bool mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const {
    return runtime::any_shares_storage(inputs, mutated_input_positions());
  }
};

/// Runs `traced` with ember's Executor (compiled now, see runtime::Executor).
std::unique_ptr<GraphRunner> make_executor_runner(tracer::TracedGraph traced,
                                                  const runtime::ExecutorOptions& options);

/// Runs a joint forward-and-backward graph as a runtime::CompiledFunction (split and compiled
/// now): the outputs' grad_fn runs the compiled backward. graph() is the forward graph.
std::unique_ptr<GraphRunner> make_training_runner(tracer::TracedGraph joint,
                                                  runtime::JointSignature signature,
                                                  const runtime::ExecutorOptions& options);

/// Exports `traced` (to_graph_module) and compiles it with `backend` now, passing
/// `example_inputs` (see the file comment). Throws UserError naming the exception when the
/// backend raises or returns something that is not callable; Unsupported when the graph cannot
/// be exported.
std::unique_ptr<GraphRunner> make_backend_runner(tracer::TracedGraph traced,
                                                 nanobind::handle backend,
                                                 const std::vector<at::Tensor>& example_inputs);

}  // namespace ember::capture
