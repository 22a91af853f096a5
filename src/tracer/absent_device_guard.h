#pragma once

// Note [Tracing for a device this torch lacks]
// `ember.trace(..., device="cuda:0")` makes tracer tensors that report a CUDA device on a
// torch built without CUDA: tests and scripts see the graph, the scheduling and the Triton code
// a GPU would get, on the CPU machine. Tracing a forward needs nothing of the device. Autograd
// does: each node it records keeps its input's stream, and the engine runs the backward on a
// worker thread per device, both through the device's DeviceGuardImpl, which a CPU-only torch
// does not register ("PyTorch is not linked with support for cuda devices", thrown where no
// exception may pass: the interpreter aborted).
//
// So a tracer tensor reporting a device type with no guard registers a stand-in first: one
// device, one stream, events that are already complete, and no memory of its own (tracer
// tensors own none). It never replaces a real guard, and it does nothing but tell autograd
// where the tensors live: tracing runs no kernels. Once registered it stays for the process
// (the registry cannot forget); a real tensor on that device still fails where it allocates
// (no allocator), with torch's own message.
//
// A session with a stand-in device also reads the CPU as that device wherever an op's arguments
// name one (TraceSession::add_input): the graphs Dynamo made on the CPU machine bake `cpu` into
// factories (`arange(n, device=cpu)`) and copies (`labels.to(logits.device)`), and the CUDA
// program would have had `cuda:0` there. Real CPU tensors the program makes stay constants.

#include <c10/core/DeviceType.h>

namespace ember::tracer {

/// Registers the stand-in guard for `type` when torch has none (a CPU-only build traced for
/// CUDA); otherwise does nothing. Thread-safe and idempotent. Returns whether `type`'s guard is
/// the stand-in (now or from before).
bool ensure_device_guard(c10::DeviceType type);

}  // namespace ember::tracer
