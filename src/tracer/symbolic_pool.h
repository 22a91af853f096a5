/// \file
/// aten::max_pool1d on tracer tensors with shape symbols, decomposed here over SymInts.
///
/// max_pool1d is a CompositeImplicitAutograd op whose decomposition checks its input's length as
/// a number (`size(-1)`): under a symbolic length that read pinned the symbol to its hint, so
/// every new length recompiled. On tracer tensors with symbolic sizes (an AutogradPrivateUse1
/// kernel) it decomposes here as max_pool1d_with_indices does, a 2-D pool over [.., 1, L],
/// whose shape rule keeps the length symbolic; other calls run ATen's own decomposition.
#pragma once

namespace ember::tracer {

/// Registers the kernel. Idempotent; called by register_tracer_kernels (dispatch.h).
void register_symbolic_pool();

}  // namespace ember::tracer
