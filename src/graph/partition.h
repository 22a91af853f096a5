/// \file
/// A joint forward-and-backward graph split into a forward graph and a backward graph.
///
/// The joint graph is what the tracer records when autograd runs on tracer tensors: the
/// program's nodes, then the backward ops of `torch.autograd.grad(outputs, primals, tangents)`.
/// Its inputs are the primals (the program's inputs, constants among them) and the tangents (one
/// per differentiable output); its outputs are the program's outputs, then the gradients.
///
/// The split (AOTAutograd's default partition; SplitOptions::recomputable picks the min-cut one):
///  - forward: the nodes the program's outputs need;
///  - backward: the nodes the gradients need that the forward does not compute (the backward
///    ops, and forward-only computations of the primals that only the gradients read, such as a
///    weight's transpose: recomputed there rather than saved);
///  - saved: what backward nodes (or the gradients themselves) read of the forward's values and
///    the primals. Constants are not saved: the backward graph holds them too.
/// Nodes neither side needs are dropped. Input mutations (BatchNorm's running statistics) are
/// the forward's: their values are computed there, and the forward graph applies them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/graph.h"

namespace ember::graph {

struct JointSplit {
  /// Inputs: the joint's primal inputs, in order (constants among them, with their kinds and
  /// names). Outputs: the program's outputs, then the saved values that are not primal inputs.
  Graph forward;
  /// Inputs: the saved values (kind User, named `saved<i>`), then the tangents, then the
  /// constants it reads (kind Constant). Outputs: the gradients, in the joint's order.
  Graph backward;
  /// One per saved value, in the order of the backward's first inputs: the index of the joint
  /// input it is (a primal, passed by the caller), or -1 for a forward output (the next one after
  /// the program's outputs, in order).
  std::vector<int> saved_inputs;
  /// For each Constant input of forward, then of backward: its index among the joint's Constant
  /// inputs (the owner's constant tensors).
  std::vector<int> forward_constants, backward_constants;
  /// Bytes of the saved values (their traced sizes).
  int64_t saved_bytes = 0;
};

struct SplitOptions {
  /// Set: the min-cut rematerialization partition (AOTAutograd's). Forward nodes for which it
  /// returns true (cheap, fusible, deterministic: pointwise ops and views) may run again in the
  /// backward, from saved values; the values saved are a minimum cut in bytes between the
  /// primals and the nodes that may not be recomputed on one side and what the backward reads on
  /// the other. Unset: the default partition (save what the backward reads).
  std::function<bool(const Graph&, const Node&)> recomputable;
  /// With `recomputable`, optional: nodes that read their tensor arguments from memory (the
  /// scheduler's externs: products, convolutions, attention), and views (an alias of their first
  /// tensor argument). A value that a backward node reading memory reads, directly or through
  /// views, is written in the backward when it is recomputed there; it is computed in the forward
  /// and saved instead (Note [Values the backward writes anyway are saved]).
  std::function<bool(const Graph&, const Node&)> reads_memory;
  std::function<bool(const Graph&, const Node&)> is_view;
  /// With `recomputable`, optional: recomputable nodes whose outputs are not banned from
  /// recompute by a backward node reading them from memory (Note [Values the backward writes
  /// anyway are saved]): what is recomputed for memory, not for time (an all-gathered
  /// parameter, freed after the forward and gathered again, as FSDP2 does).
  std::function<bool(const Graph&, const Node&)> recompute_for_memory;
};

/// Splits `joint`. `is_tangent[i]` says whether the joint's input i is a tangent (never a
/// Constant); `num_forward_outputs` of the joint's outputs are the program's, the rest gradients.
/// Requires: a verified graph whose mutations update primals. Guarantees: both graphs pass the
/// verifier (the forward has the joint's mutations, the backward none); the
/// forward reads no tangent; running the forward on the primals and the backward on the saved
/// values and tangents gives the joint's outputs. Throws ember::InternalError when a forward
/// output depends on a tangent.
JointSplit split_joint(const Graph& joint, const std::vector<bool>& is_tangent,
                       int num_forward_outputs, const SplitOptions& options = {});

}  // namespace ember::graph
