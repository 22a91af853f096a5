#pragma once

// The bias of a CUDA convolution, recorded apart from it (Inductor peels it off the same way).
//
// Eager's convolution on CUDA runs cuDNN without the bias and then adds it in a second ATen
// kernel over the whole output (at::native::_convolution: output.add_(bias)): one more read and
// write of every convolution's output. A convolution on a CUDA tracer tensor with a bias is
// therefore recorded without it, followed by an `aten::add` of the bias viewed as [1, C, 1, ...]:
// the add is pointwise, so it fuses into the kernel that reads the convolution's result
// (ConvNeXt's layer norm, a ReLU, a batch norm), and the output has the values eager's cuDNN path
// gives (the bias added to the rounded result, in its dtype).
//
// Left as they are: calls under autograd (a tensor that requires grad with grad mode on), biases
// that are not one value per output channel, and dtypes other than f32, bf16 and f16.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace ember::rewrite {

/// `aten::convolution` called with `args` (tracer tensors), recorded as the convolution without
/// its bias and an add of the bias, or nullopt when the call is recorded as it is.
std::optional<at::Tensor> convolution_bias_apart(const c10::OperatorHandle& op,
                                                 c10::ArrayRef<c10::IValue> args);

}  // namespace ember::rewrite
