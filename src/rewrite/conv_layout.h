#pragma once

// Channels-last layout for 2D convolutions on CUDA (Inductor's layout optimization).
//
// cuDNN's tensor-core convolutions work on NHWC. Given NCHW tensors, eager's convolution
// transposes the input to NHWC and the result back, per call (cuDNN's nchwToNhwc and nhwcToNchw
// kernels), and a depthwise convolution runs ATen's slow NCHW kernel. A 2D convolution on a CUDA
// tracer tensor is therefore recorded on channels-last copies of its input and weight, so cuDNN's
// NHWC kernels run and its result is channels-last. The meta kernels carry the layout on: batch
// norm, activations, residual adds and pools of a channels-last tensor are channels-last, so the
// next convolution's input needs no copy, and a permute to NHWC (ConvNeXt's LayerNorm over
// channels) becomes a row-contiguous view. TraceSession::finish turns the graph's 4D outputs
// that came out channels-last back to contiguous, the layout eager gives them.
//
// Grouped convolutions with more than one channel per group (ResNeXt, RegNet) are not put
// channels-last by this rule: whether cuDNN's NHWC kernels are faster for them depends on the
// channels per group and the size (Note [Grouped convolutions by timing]); in inference they
// take the layout that times faster on the device. Transposed convolutions, 1D and 3D ones, and
// other dtypes are left in their layout.
//
// On the CPU, where ATen's convolutions run on oneDNN (mkldnn), the same holds for its NHWC
// kernels, grouped ones included: Inductor puts every CPU convolution channels-last when oneDNN
// is there (its layout decision: "for cpu backend and mkldnn enabled, we always use
// channels_last"). Without oneDNN (a torch built without it, or torch.backends.mkldnn turned off)
// a CPU convolution is left as it is.
//
// "Channels-last" is what the convolutions' layout choice sees (suggest_memory_format), not
// is_contiguous(ChannelsLast), which ignores size-1 dims: a depthwise weight [C, 1, k, k] and a
// batch-1 input viewed from tokens are restrided to at::empty's channels-last strides (views),
// Note [Channels-last in ATen's eyes] in conv_layout.cpp.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <vector>

namespace ember::rewrite {

/// `aten::convolution` called with `args` (tracer tensors), recorded on channels-last operands,
/// or nullopt when the call is recorded as it is. `*from_contiguous` is set when neither the
/// input nor the weight was channels-last (eager's result would be contiguous), so that the
/// graph's outputs go back to that layout. `grouped`: also
/// grouped convolutions with several channels per group (the CPU's oneDNN). The device is the
/// table's device predicate (not checked here).
std::optional<at::Tensor> channels_last_convolution(const c10::OperatorHandle& op,
                                                    c10::ArrayRef<c10::IValue> args,
                                                    bool* from_contiguous, bool grouped = false);

/// A grouped CUDA convolution (several channels per group, or one: depthwise), recorded on the
/// operand layout that cuDNN runs faster on this device: both layouts timed once per shape and
/// dtype (Note [Grouped convolutions by timing]). nullopt when the call is recorded as it is: not
/// such a convolution, no CUDA device here (a trace for an absent device), the operands already
/// channels-last where that is faster, or the timing failed. `*from_contiguous` as for
/// channels_last_convolution.
std::optional<at::Tensor> grouped_convolution_by_timing(const c10::OperatorHandle& op,
                                                        c10::ArrayRef<c10::IValue> args,
                                                        bool* from_contiguous);

/// A convolution shape timed by grouped_convolution_by_timing in this process: its key (input,
/// weight, stride, padding, dilation sizes, groups, dtype, device), the best seconds per call on
/// each layout, and the decision.
struct TimedConvolution {
  std::string key;
  double nchw_seconds = 0, nhwc_seconds = 0;
  bool nchw = false;
};

/// The shapes timed so far in this process, in key order (`ember._C.timed_convolutions()`).
std::vector<TimedConvolution> timed_convolutions();

/// Whether ATen's CPU convolutions run on oneDNN here (built with it and not turned off by
/// torch.backends.mkldnn.enabled = False), so that channels-last operands reach its NHWC kernels.
bool cpu_convolutions_use_onednn();

}  // namespace ember::rewrite
