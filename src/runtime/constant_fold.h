/// \file
/// Constant folding: nodes whose every tensor argument is the result of another folded node
/// (factories have none; `zeros_like`, `new_ones`, ... read only metadata, so any argument
/// will do) run once, at compile time, and their results
/// that the rest of the graph reads become constant inputs. Factories such as `arange`,
/// `scalar_tensor`, `full` and the masks built from them then cost nothing per call.
#pragma once

#include "tracer/trace_session.h"

namespace ember::runtime {

struct FoldOptions {
  /// Results with more elements than this are not folded: they would be held for the graph's
  /// lifetime.
  int64_t max_elements = 1 << 16;
};

/// Rewrites `traced` in place. Folds a node when: every tensor argument is the result of a folded
/// node (not a tensor captured while tracing: that may be a caller's tensor, updated in place
/// between calls); its operator
/// is deterministic (not tagged nondeterministic_seeded: no rand, dropout, ...); none of its
/// outputs is a graph output or a mutation's value (a caller may mutate what it gets back, so it
/// must be fresh per call); and each output has at most options.max_elements elements.
/// Guarantees: the graph computes the same values; folded nodes are gone; each folded value read
/// by a remaining node is a new Constant input (appended after the existing inputs, its tensor
/// appended to traced.constants) with the traced sizes and strides; values only folded nodes read
/// are dropped. The rewritten graph passes the verifier. Returns the number of folded nodes.
/// Throws what the folded ops throw.
int fold_constants(tracer::TracedGraph& traced, const FoldOptions& options = {});

/// Whether `op`'s result depends only on its tensor arguments' metadata (dtype, device, sizes,
/// strides), never on their data (`zeros_like`, `new_ones`, ...): such a node folds even when
/// those arguments are not constant.
bool reads_only_metadata(const graph::OpInfo& op);

/// A tensor with the metadata of `t` and unspecified contents (what a metadata-only op reads).
at::Tensor stand_in(const graph::TensorType& t);

}  // namespace ember::runtime
