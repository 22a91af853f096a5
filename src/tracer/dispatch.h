/// \file
/// Registers ember's tracer kernel with the PyTorch dispatcher (see tracer_tensor.h).
#pragma once

namespace ember::tracer {

/// Registers the boxed tracer kernel for the PrivateUse1 key: as the backend fallback, and directly
/// for every op that has a CompositeExplicitAutograd kernel (those would otherwise decompose before
/// the fallback could see them). Idempotent; call once at import.
void register_tracer_kernels();

}  // namespace ember::tracer
