/// \file
/// aten::matmul on tracer tensors with shape symbols, decomposed here over SymInts.
///
/// matmul is a CompositeImplicitAutograd op: the tracer records what its decomposition calls.
/// Some torch versions' decomposition reads sizes as numbers (torch 2.11's `_matmul_impl` calls
/// `sizes()` when it folds a batched operand), which a tensor with symbolic sizes cannot answer:
/// the trace failed and the graph fell back to static shapes on every attention product. So on
/// tracer tensors (an AutogradPrivateUse1 kernel) matmul decomposes here, with symbolic sizes,
/// the same way on every torch: dot, mv and mm for 1- and 2-D operands; a batched operand times a
/// matrix or vector folded into one mm or mv over its flattened rows; otherwise both operands
/// expanded to the broadcast batch, reshaped to 3-D and multiplied by bmm. A call on tracer
/// tensors with static sizes runs ATen's own decomposition.
#pragma once

namespace ember::tracer {

/// Registers the kernel. Idempotent; called by register_tracer_kernels (dispatch.h).
void register_symbolic_matmul();

}  // namespace ember::tracer
