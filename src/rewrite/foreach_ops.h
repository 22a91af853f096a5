#pragma once

// Foreach ops (`aten::_foreach_*`) on tracer tensors, recorded as the per-tensor ops they apply.
//
// An optimizer's multi-tensor path (`foreach=True`, Adam's and SGD's default on CUDA) calls
// `_foreach_mul_`, `_foreach_lerp_`, `_foreach_addcdiv_`, ... over the lists of parameters,
// gradients and moments. Recorded as they are, each is an ATen call over every list that the
// scheduler cannot look into. Recorded as the op on each tensor (`_foreach_add_.List(xs, ys,
// alpha)` as `xs[i].add_(ys[i], alpha)` for every i), the updates of one parameter fuse into a
// kernel over its shape and horizontal fusion merges the parameters' kernels
// (docs/design/scheduler.md, "Combo kernels"), as the foreach kernels run every tensor in a
// launch.
//
// The per-tensor op is `aten::<name without _foreach_>` with the overload whose arguments match
// the foreach op's one for one (and defaults for any it has beyond them): a `Tensor[]` argument is
// a `Tensor` (its i-th element), a `Scalar[]` a `Scalar` (its i-th), anything else the same type
// and value. A foreach op with no such overload is recorded as it is.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::rewrite {

/// Records `op` (a `_foreach_*` op, arguments on top of `stack`) as its per-tensor ops, replacing
/// the arguments with its results, and returns true; or returns false, leaving the stack alone.
bool record_foreach_as_per_tensor_ops(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace ember::rewrite
