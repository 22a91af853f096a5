/// \file
/// The executor runs a traced Graph on real tensors: each node is a boxed dispatcher call of its
/// operator, made from C++ with no Python per node. It is the fallback path for every op and the
/// oracle for tests.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "tracer/trace_session.h"

namespace ember::runtime {

class Executor {
 public:
  /// Resolves every node's operator and pre-builds its constant arguments. Throws Unsupported if
  /// an operator is not registered in this process.
  explicit Executor(tracer::TracedGraph traced);

  /// Runs the graph. `inputs` are the graph's non-constant inputs, in order. Checks that each has
  /// the dtype, device and sizes the graph was traced with (UserError otherwise). Applies the
  /// graph's input mutations, then returns its outputs.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  /// True when the graph mutates an input that shares memory with another input. The graph was
  /// traced assuming inputs do not alias, so such a call must run eagerly instead.
  bool mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const;
  bool has_mutations() const { return !traced_.graph.mutations.empty(); }

  const graph::Graph& graph() const { return traced_.graph; }
  size_t num_user_inputs() const { return input_slots_.size(); }

 private:
  struct Step {
    c10::OperatorHandle op;
    std::vector<c10::IValue> args;  ///< constant arguments; tensor slots hold None
    /// (argument position, value) for each tensor argument.
    std::vector<std::pair<int, graph::ValueId>> tensor_args;
    /// (argument position, list) for each tensor-list argument.
    std::vector<std::pair<int, const graph::ValueList*>> list_args;
    std::vector<graph::ValueId> outputs;
    std::vector<int32_t> result_slots;    ///< see graph::Node::result_slots
    std::vector<graph::ValueId> release;  ///< values whose last use is this step
  };

  tracer::TracedGraph traced_;
  std::vector<graph::ValueId> input_slots_;  ///< value of each non-constant input
  std::vector<std::pair<graph::ValueId, int>> constant_slots_;  ///< value, index in constants
  std::vector<Step> steps_;
  std::vector<size_t> mutated_input_positions_;  ///< positions in `inputs` of mutated inputs
};

}  // namespace ember::runtime
