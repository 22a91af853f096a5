#pragma once

// The memory layout of a convolution's result, which its meta kernel does not know.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace ember::tracer {

/// The layout of a convolution's result, which the meta kernel does not know: cuDNN returns
/// channels-last when the input or the weight of a 2D convolution is channels-last
/// (cudnn_conv_suggest_memory_format; not in f64), and so do the CPU's kernels (oneDNN's and the
/// slow ones, every dtype, transposed too). Restrides `meta_result` (the meta kernel's result of
/// `aten::convolution` called with `args`) to channels-last in that case. Before, a CPU
/// convolution of a channels-last module was recorded contiguous: the graph's pointwise kernels
/// after it wrote contiguous outputs where eager's are channels-last. (The rewrite that records a
/// CUDA convolution on channels-last operands is rewrite/conv_layout.h.)
void convolution_layout(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                        at::Tensor& meta_result);

}  // namespace ember::tracer
