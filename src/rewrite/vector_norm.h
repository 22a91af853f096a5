#pragma once

// Note [Vector norms as reductions]
// `aten::linalg_vector_norm` (F.normalize, Tensor.norm, torch.linalg.vector_norm; XCiT's
// cross-covariance attention normalizes q and k so) has no reduction kernel of its own: recorded
// as it is, it is an ATen call that reads its input once more, and the clamp and division of
// F.normalize after it are a kernel apart. Recorded as the reduction it is, over the input cast
// to the accumulation type (f32 for bf16/f16, eager's `acc_type`), after the cast to `dtype=`
// where one is given:
//     ord 2:        sqrt(sum(x * x))          ord 1:  sum(|x|)
//     ord inf:      amax(|x|)                 ord -inf: amin(|x|)
//     ord p > 0:    sum(|x| ^ p) ^ (1 / p)
// rounded once to the result's dtype. The squares join the sum's kernel as its prologue, the
// square root (and a following clamp and division) its epilogue. Autograd still records
// linalg_vector_norm (this runs below it), with its own backward formula. Other orders (0,
// negative, nan), complex inputs and the out= overload are recorded as they are.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace ember::rewrite {

/// `aten::linalg_vector_norm` called with `args` (tracer tensors) recorded as above, or nullopt
/// when it is recorded as it is.
std::optional<at::Tensor> vector_norm_as_reduction(const c10::OperatorHandle& op,
                                                   c10::ArrayRef<c10::IValue> args);

}  // namespace ember::rewrite
