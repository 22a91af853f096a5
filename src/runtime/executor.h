/// \file
/// The executor runs a traced Graph on real tensors as a C++ program of steps, with no Python per
/// step:
///  - an extern step is one node, run as a boxed dispatcher call of its ATen operator;
///  - a kernel step is a fused group of nodes (src/sched/fusion.h), run as one generated C++
///    kernel, compiled by the host compiler and called through a function pointer, with its
///    outputs allocated at the traced sizes and strides.
/// Without code generation (or off the CPU) every step is extern: the executor is then the
/// fallback path for every op and the oracle for tests.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/host_compiler.h"
#include "tracer/trace_session.h"

namespace ember::runtime {

struct ExecutorOptions {
  /// Fuse pointwise nodes into generated C++ kernels (CPU graphs only).
  bool codegen = true;
  /// Also generate kernels for reductions (see sched::ScheduleOptions::reductions).
  bool reductions = false;
};

class Executor {
 public:
  /// Resolves every extern node's operator, pre-builds constant arguments, and (with codegen)
  /// schedules, generates and compiles the kernels, in parallel and through the kernel cache. A
  /// kernel that fails to compile makes the whole graph run unfused (see codegen_error()).
  /// Throws Unsupported if an operator is not registered in this process.
  explicit Executor(tracer::TracedGraph traced, ExecutorOptions options = {});
  ~Executor();

  /// Runs the graph. `inputs` are the graph's non-constant inputs, in order. Checks that each has
  /// the dtype and sizes the graph was traced with (UserError otherwise). Inputs whose strides
  /// differ from the traced ones run unfused (kernels bake strides in). Applies the graph's input
  /// mutations, then returns its outputs.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  /// True when the graph mutates an input that shares memory with another input. The graph was
  /// traced assuming inputs do not alias, so such a call must run eagerly instead.
  bool mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const;
  bool has_mutations() const { return !traced_.graph.mutations.empty(); }

  const graph::Graph& graph() const { return traced_.graph; }
  size_t num_user_inputs() const { return input_slots_.size(); }
  int num_kernels() const { return static_cast<int>(kernels_.size()); }
  int num_fused_nodes() const { return num_fused_nodes_; }
  /// Steps that are boxed ATen calls.
  int num_extern_steps() const {
    int n = 0;
    for (const Step& s : steps_) n += s.op.has_value();
    return n;
  }
  /// Steps that make views of a realized tensor (each replaces a chain of ATen view calls).
  int num_view_steps() const {
    int n = 0;
    for (const Step& s : steps_) n += s.view_root >= 0;
    return n;
  }
  /// Why code generation was abandoned for this graph; empty if it was not.
  const std::string& codegen_error() const { return codegen_error_; }
  /// The generated C++ translation units (each holds one or more kernels).
  const std::vector<std::string>& kernel_sources() const { return kernel_sources_; }

 private:
  struct Kernel {
    using Fn = void (*)(void* const*, const int64_t*);
    /// How to allocate one output: traced sizes and strides, decided at compile time.
    struct Output {
      std::vector<int64_t> sizes, strides;
      at::TensorOptions options;
    };
    Fn fn = nullptr;
    std::vector<graph::ValueId> inputs, outputs;
    std::vector<Output> allocations;  ///< one per output
    bool index_status = false;        ///< see sched::KernelGroup::index_status
  };
  /// One output of a view step: a view of the step's root at this traced geometry.
  struct ViewOutput {
    graph::ValueId value = -1;
    std::vector<int64_t> sizes, strides;
    int64_t offset_delta = 0;  ///< the view's traced storage offset minus the root's
  };
  struct Step {
    // Extern step: the op and its arguments. Kernel step: `kernel` >= 0. View step:
    // `view_root` >= 0 (see sched::PlanStep::Kind::View).
    std::optional<c10::OperatorHandle> op;
    std::vector<c10::IValue> args;  ///< constant arguments; tensor slots hold None
    std::vector<std::pair<int, graph::ValueId>> tensor_args;
    std::vector<std::pair<int, const graph::ValueList*>> list_args;
    std::vector<graph::ValueId> outputs;
    std::vector<int32_t> result_slots;  ///< see graph::Node::result_slots
    int kernel = -1;
    /// Extern outputs that kernels or view steps read at their traced strides: (output value,
    /// traced strides). A call whose result has other strides (of dims of size > 1) runs unfused.
    std::vector<std::pair<graph::ValueId, std::vector<int64_t>>> check_strides;
    graph::ValueId view_root = -1;
    std::vector<ViewOutput> views;
    std::vector<graph::ValueId> release;  ///< values whose last use is this step
  };

  Step extern_step(int32_t node) const;
  Step view_step(int32_t node, graph::ValueId root) const;
  /// Runs one kernel; false when it reported an out-of-range index (and wrote nothing).
  bool run_kernel(const Kernel& k, std::vector<at::Tensor>& env) const;
  bool strides_match(const std::vector<at::Tensor>& inputs) const;

  tracer::TracedGraph traced_;
  std::vector<graph::ValueId> input_slots_;  ///< value of each non-constant input
  std::vector<std::pair<graph::ValueId, int>> constant_slots_;  ///< value, index in constants
  std::vector<Step> steps_;
  std::vector<Kernel> kernels_;
  std::vector<std::shared_ptr<KernelLibrary>> libraries_;
  std::vector<std::string> kernel_sources_;
  std::vector<size_t> mutated_input_positions_;  ///< positions in `inputs` of mutated inputs
  int num_fused_nodes_ = 0;
  std::string codegen_error_;
  /// The same graph without kernels, for calls whose input strides differ from the traced ones.
  std::unique_ptr<Executor> unfused_;
};

}  // namespace ember::runtime
