#pragma once

// Matrix products whose leading dimensions cuBLAS cannot use with its fast kernels, padded.
//
// cuBLAS picks its tensor-core kernels only when every matrix's leading dimension is a multiple
// of 16 bytes (8 bf16/f16 elements, 4 f32 ones). A language model's head has a vocabulary of
// 50257 or 30522 columns, so its product falls to an "align1" kernel that runs several times
// slower. A large unaligned product on a CUDA tracer tensor is recorded instead as the product
// of zero-padded operands, sliced back:
//
//     mm(a, b)          -> mm(pad(a), pad(b))[:m, :n]
//     addmm(c, a, b)    -> addmm(pad(c), pad(a), pad(b))[:m, :n]
//     bmm(a, b)         -> bmm(pad(a), pad(b))[:, :m, :n]
//
// Padding adds zero terms only, so the values are the product's. A padded operand keeps its
// orientation (a column-major operand is padded as its transpose), so a weight read transposed
// is not transposed by the copy. A result whose columns were sliced off is made contiguous again,
// the layout eager gives it: a copy that the scheduler fuses into the kernel that reads the
// result, or that writes the graph's output. Products of fewer than 2^26 multiply-adds, and other
// dtypes or devices, are recorded as they are. In inference a 2D product whose result is 64 MiB
// or more and whose columns are padded is recorded as ember::matmul_sliced instead, which makes
// the contiguous result block by block of rows, with one scratch block beside it rather than a
// whole padded copy (Note [Padded products in row blocks]: a language model's logits).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace ember::rewrite {

/// The padded form of `op` (aten::mm, aten::addmm or aten::bmm) called with `args` (tracer
/// tensors), computed by tracing the padded ops, or nullopt when the call is recorded as it is.
std::optional<at::Tensor> pad_unaligned_matmul(const c10::OperatorHandle& op,
                                               c10::ArrayRef<c10::IValue> args);

}  // namespace ember::rewrite
