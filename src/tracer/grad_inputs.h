/// \file
/// The traced inputs that require grad in a joint trace, and the gradients collected at them.
///
/// Note [Traced inputs modified in place]
/// A joint trace runs autograd on tracer tensors: the inputs that require grad are made to
/// require grad, the program runs, and the gradients of its outputs are taken at those inputs.
/// When every such tracer tensor is a leaf of autograd's graph, an in-place op on one raises
/// ("a leaf Variable that requires grad is being used in an in-place operation"), as it would in
/// eager for a leaf. But a graph's input often stands for a tensor autograd computed: an
/// activation handed from one graph to the next across a graph break, or between the pieces
/// DDPOptimizer cuts a model into, and eager modifies such a non-leaf in place freely
/// (torchvision's `out += identity`, where a piece starts just before it). Traced as a leaf, the
/// whole graph fell back to eager.
///
/// So an input that stands for a non-leaf is traced as one: its tracer tensor's grad_fn is a
/// pass-through node (autograd's Identity) of its own, and its gradient is collected at that
/// node's edge, which stays where it is when an in-place op rebases the tensor's history past
/// it. An input that stands for a leaf stays a leaf (an in-place op on it raises as in eager).
/// `modified_in_place` then names the inputs whose history moved: the program changed them in
/// place under grad mode. Their values after the program are extra outputs of the joint graph,
/// differentiable ones (so the backward takes a gradient for them), and the caller's tensor is
/// given the compiled backward as its history (runtime/compiled_function.h,
/// JointSignature::rebased_inputs), as eager's in-place op would have given it the op's.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>  // Edge holds a Node: complete for the destructor

#include <vector>

namespace ember::tracer {

class GradInputs {
 public:
  /// Makes tracer tensor `t` require grad: a leaf of autograd's graph when `leaf` (the tensor it
  /// stands for is one), else a non-leaf behind a pass-through node of its own.
  void add(const at::Tensor& t, bool leaf);

  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  bool empty() const { return tensors_.empty(); }

  /// The positions (in `add` order) of the inputs whose history an in-place op moved since they
  /// were added.
  std::vector<int> modified_in_place() const;

  /// The gradients of `outputs` (weighted by `tangents`) at each input's edge, one per input,
  /// undefined where no output reaches it (torch.autograd.grad with allow_unused=True): by
  /// autograd's engine, or by walk_backward_to when `walk` (Note [A backward without autograd's
  /// engine]). Call without the GIL: meta kernels written in Python take it.
  std::vector<at::Tensor> gradients(const std::vector<at::Tensor>& outputs,
                                    const std::vector<at::Tensor>& tangents, bool walk) const;

 private:
  std::vector<at::Tensor> tensors_;
  std::vector<torch::autograd::Edge> edges_;  ///< where each one's gradient arrives
};

}  // namespace ember::tracer
