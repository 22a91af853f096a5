#pragma once

// A 1x1 convolution on CUDA as a matrix product (Inductor's conv_1x1_as_mm, which it keeps for
// max-autotune).
//
// A pointwise convolution over a channels-last input is the product of the input's [N * H * W, C]
// rows and the weight's [O, C] transposed, and its result, viewed back, is the convolution's
// channels-last result. Timed alone, cuBLAS runs it for less than cuDNN on the host and on the
// device: at batch 1 in bf16 on an H100 a cuDNN call cost 12-13 us of host time and 8.5-9.8 us on
// the device against 10.8-11 and 6.1-6.6 for cuBLAS's product (scripts/conv_host_probe.py,
// session 66, Python's call included), and a mobile net at batch 1 waits on its host for most of
// its 50-80 convolutions; the product also gets ember's template, which takes the batch norm and
// activation after it as its epilogue. By default only launch-bound ones become products (at most
// CompileOptions::Runtime::launch_bound_products multiply-adds, on CUDA, not under CUDA graphs:
// Note [Launch-bound products], runtime/executor_matmul.cpp); every one with
// CompileOptions::Trace::pointwise_convolutions_as_products (EMBER_CONV1X1_AS_MM=1).
//
// Note [Pointwise convolutions as products, measured]
// As cuBLAS's products alone (no templates) it did not pay on the one H100 measured (session 66,
// batch 1, bf16, latency_probe, ember-capture, on / off in one process each): tv_resnet50 1.43 /
// 1.30 ms, timm_mobilenetv3_large_100 1.85 / 2.11, timm_efficientnet_b0 3.19 / 2.83,
// tv_mobilenet_v2 2.99 / 1.70 (a noisy host). With the templates (session 67, ab_probe, both in
// one process): tv_mobilenet_v2 0.917 / 1.435 ms, timm_efficientnet_b0 1.170 / 2.002.
//
// Only in inference (grad mode off), for bf16 and f16 (an f32 convolution runs on TF32 by
// default, cuBLAS's f32 product does not), for a 4D input that is channels-last in ATen's eyes,
// stride 1, padding 0, one group, not transposed. A bias is added after the product (the add
// fuses into the kernel that reads it).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace ember::rewrite {

/// `aten::convolution` called with `args` (tracer tensors), recorded as the product above, or
/// nullopt when the call is recorded as it is. `max_products` > 0: only a convolution on a CUDA
/// device of at most that many multiply-adds (N * H * W * C * O; a launch-bound product, which
/// ember's templates compute, runtime/pipeline.h attach_matmul_templates).
std::optional<at::Tensor> pointwise_convolution_as_product(const c10::OperatorHandle& op,
                                                           c10::ArrayRef<c10::IValue> args,
                                                           int64_t max_products = 0);

}  // namespace ember::rewrite
