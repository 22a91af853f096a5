/// \file
/// The `.vec` overloads of ATen's upsampling ops (what F.interpolate calls) on tracer tensors,
/// decomposed here over SymInts.
///
/// Each `.vec` overload is a CompositeImplicitAutograd op that reads its input's sizes as numbers
/// to compute the output size; on a tracer tensor with symbolic sizes that read fails inside
/// torch (an internal assert of its argument parser), and the frame compiled per size. On tracer
/// tensors (an AutogradPrivateUse1 kernel) the output size is computed here as torch does (the
/// given output_size, or each spatial size times its scale factor, truncated) and the default
/// overload is called with the same scales, as the composite does. Over a symbolic size a scale
/// factor must be a dyadic rational (p / 2^k: 2.0, 0.5, 1.5, ...), where the truncated product is
/// exactly (size * p) // 2^k; another is Unsupported.
#pragma once

namespace ember::tracer {

/// Registers the kernels. Idempotent; called by register_tracer_kernels (dispatch.h).
void register_symbolic_upsample();

}  // namespace ember::tracer
