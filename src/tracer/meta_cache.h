/// \file
/// A process-wide cache of meta-kernel results, keyed by the operator and the metadata of its
/// arguments. Many meta kernels are Python (torch._refs / _meta_registrations): recording a
/// model of repeated blocks spent most of its capture time re-running them on identical
/// arguments.
///
/// Only calls whose results are new tensors (no alias annotation on a return, no mutated
/// argument) and whose arguments are all meta tensors, wrapped CPU scalars (their value is part
/// of the key) or plain values are cached; a hit makes fresh meta tensors with the recorded
/// dtype, sizes and strides. The key also holds the default dtype and the autocast state, which
/// meta kernels may read.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::tracer {

/// Replaces `meta_stack` (the arguments, meta tensors in place of traced ones) by `op`'s
/// results: from the cache, or by calling `op` (boxed) and remembering the results.
void call_meta_cached(const c10::OperatorHandle& op, torch::jit::Stack& meta_stack);

/// Empties the cache; its number of entries.
void clear_meta_cache();
size_t meta_cache_size();

}  // namespace ember::tracer
