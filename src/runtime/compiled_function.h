/// \file
/// A compiled graph that autograd differentiates: the forward and the backward graph of a joint
/// graph (graph/partition.h), each run by an Executor, joined by a torch::autograd::Node.
///
/// A call runs the forward graph on the primals. When grad mode is on and an input that has a
/// gradient in the joint graph requires grad, the differentiable outputs get one backward node
/// (`EmberCompiledBackward`) as their grad_fn, holding what the backward reads as SavedVariables
/// (so an in-place change of a saved input is caught, as eager autograd does). The node's
/// backward runs the backward graph on the saved values and the incoming gradients (zeros for
/// an output no loss reached) and returns one gradient per input edge. Under no_grad or
/// inference_mode, or when no input requires grad, only the forward runs and nothing is saved.
///
/// Double backward (create_graph=True) falls back to eager: with an eager fallback installed
/// (set_eager_backward), the node runs the program again eagerly on its inputs and differentiates
/// that with autograd, so the gradients have a history to differentiate again. Only for a graph
/// without input mutations or random ops (running it again would update BatchNorm's statistics
/// twice, or draw other dropout masks) whose inputs are autograd leaves (parameters, inputs
/// made to require grad); otherwise an Unsupported error names what is missing. Not supported: a
/// second backward through a node whose saved values were freed (an error, as eager's, naming
/// retain_graph).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "graph/partition.h"
#include "runtime/executor.h"
#include "tracer/trace_session.h"

namespace ember::runtime {

/// How a joint graph's inputs and outputs relate to the program's (see tracing.trace_joint).
struct JointSignature {
  std::vector<bool> is_tangent;  ///< per input of the joint graph
  int num_forward_outputs = 0;   ///< the program's outputs, first among the joint's outputs
  /// Per tangent (in input order): the index of the program output it is the gradient of.
  std::vector<int> tangent_outputs;
  /// Per gradient (the joint's outputs after the program's): the index, among the joint's
  /// non-constant, non-tangent inputs, of the input it is the gradient of.
  std::vector<int> grad_inputs;
  /// Inputs the program modifies in place under grad mode (Note [Traced inputs modified in
  /// place], tracer/grad_inputs.h): the last rebased_inputs.size() of the num_forward_outputs
  /// are their new values (differentiable, with tangents); each entry is the index, as in
  /// grad_inputs, of the input it is the new value of. CompiledFunction::run does not return
  /// them: the input itself (its data written by the forward's mutation) takes the compiled
  /// backward as its history, as an in-place op's result does.
  std::vector<int> rebased_inputs;
};

/// The signature of a joint graph whose non-constant inputs are `num_primals` primals, then one
/// tangent per entry of `tangent_outputs` (trace order; an internal error otherwise).
JointSignature joint_signature(const graph::Graph& joint, int num_primals, int num_forward_outputs,
                               std::vector<int> tangent_outputs, std::vector<int> grad_inputs);

/// Runs its argument: what a caller wraps around each run of the backward program, which
/// autograd's engine starts outside the caller's code (ember.compile pauses its frame hook there:
/// Triton's compiler and interpreter run Python that is not the program's).
using RunScope = std::function<void(const std::function<void()>&)>;

/// Double backward's fallback: given the program's primals (the tensors the call got) and the
/// gradients of its differentiable outputs, runs the program eagerly and returns, with
/// create_graph, the gradients of the inputs in JointSignature::grad_inputs order (undefined for
/// one the outputs do not reach).
using EagerBackward = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& primals,
                                                            const std::vector<at::Tensor>& grads)>;

class CompiledFunction {
 public:
  /// Splits `joint` and compiles both graphs with `options`. Input mutations (BatchNorm's running
  /// statistics) are applied by the forward.
  CompiledFunction(tracer::TracedGraph joint, JointSignature signature, ExecutorOptions options,
                   RunScope backward_scope = {});
  ~CompiledFunction();

  /// Runs the program on `inputs` (the joint's non-constant primals, in order): returns its
  /// outputs, the differentiable ones attached to a backward node when autograd needs them.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  const Executor& forward() const;
  /// Whether a call with `inputs` meets the size relations the joint graph's trace relied on
  /// (Executor::size_guards_hold); true for a static graph.
  bool size_guards_hold(const std::vector<at::Tensor>& inputs) const;
  const Executor& backward() const;
  /// Values the forward keeps for the backward (intermediates and inputs), and their bytes.
  int num_saved() const;
  int64_t saved_bytes() const { return saved_bytes_; }
  /// The program's outputs: the forward graph's first outputs (the saved values follow).
  int num_forward_outputs() const;

  /// Installs double backward's fallback. Calls made after it keep their leaf inputs for it.
  void set_eager_backward(EagerBackward f);
  /// Whether the joint graph may run again for double backward: no input mutations, no random
  /// ops.
  bool replayable() const { return replayable_; }

  struct State;
  /// Backward programs compiled for calls with undefined tangents (Note [Gradients no loss
  /// reached]).
  int num_zero_tangent_programs() const;

 private:
  std::shared_ptr<const State> state_;
  std::shared_ptr<const EagerBackward> eager_backward_;
  int64_t saved_bytes_ = 0;
  bool replayable_ = false;
};

/// A joint graph split as CompiledFunction splits it (graph/partition.h: the min-cut partition
/// unless `options.min_cut` is off, which saves what the backward reads), each side with the
/// constants it reads.
struct TrainingGraphs {
  tracer::TracedGraph forward, backward;
  graph::JointSplit split;  ///< saved_inputs, saved_bytes (its graphs moved out: empty)
};
TrainingGraphs split_training_graph(const tracer::TracedGraph& joint,
                                    const JointSignature& signature,
                                    const CompileOptions::Training& options = {});

}  // namespace ember::runtime
