#pragma once

// Attention's backend, chosen as eager chooses it on CUDA.
//
// `aten::_fused_sdp_choice` decides which kernel scaled_dot_product_attention's composite calls.
// Its meta kernel always answers "math", which would decompose attention into matmuls and a
// softmax. On tensors that report a CUDA device the tracer asks the CUDA kernel itself, as eager
// would: it reads only metadata (sizes, strides, dtype, device, requires_grad), which tracer
// tensors have, and the device's properties. On a torch without CUDA, the stand-in device sets
// the choice's DispatchStub to an approximation of the H200's (tracer/absent_device_guard.cpp).

#include "tracer/rewrite_call.h"

namespace ember::rewrite {

/// The rewrite row's function (the table's `sdp_choice`, on CUDA): pushes the CUDA kernel's
/// choice for `_fused_sdp_choice` and returns true; false leaves the stack as it was (another
/// op, or the kernel refused the tracer tensors).
bool choose_sdp_backend(tracer::RewriteCall& call);

}  // namespace ember::rewrite
