#pragma once

// Note [A backward without autograd's engine]
// Tracing for a device this torch lacks (Note [Tracing for a device this torch lacks]) records
// the forward, but `torch.autograd.grad` on its tensors cannot run: autograd's engine asks the
// accelerator for its current stream as it queues the tangents, and a CPU-only torch has no
// accelerator ("Cannot access accelerator device when none is available"). `walk_backward`
// does the part of the engine's work that tracing needs, on the calling thread: from the
// outputs' gradient edges it runs each node autograd recorded, once all its gradients have come
// in, highest sequence number first among those ready (the engine's order on one device), with
// the engine's own checks of each gradient against what the next node expects
// (`validate_outputs`: sums broadcast gradients, casts to the input's dtype), grad mode off, and
// the gradients reaching each input's edge collected rather than accumulated. No streams, no
// hooks of its own (a node's hooks still run), no threads. Only trace_joint's `device=` path
// uses it; a real device uses the engine.

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/edge.h>

#include <vector>

namespace ember::tracer {

/// The gradients of `outputs` (weighted by `tangents`, one each) with respect to `inputs`:
/// one per input, undefined where no output reaches it (torch.autograd.grad with
/// allow_unused=True, create_graph=False). Raises ember::UserError when an output does not
/// require grad or the counts differ.
std::vector<at::Tensor> walk_backward(const std::vector<at::Tensor>& outputs,
                                      const std::vector<at::Tensor>& tangents,
                                      const std::vector<at::Tensor>& inputs);

/// The same, the gradients collected at `inputs` (gradient edges: where each input's gradient
/// arrives, kept from before the program modified the input in place; tracer/grad_inputs.h).
std::vector<at::Tensor> walk_backward_to(const std::vector<at::Tensor>& outputs,
                                         const std::vector<at::Tensor>& tangents,
                                         const std::vector<torch::autograd::Edge>& inputs);

}  // namespace ember::tracer
