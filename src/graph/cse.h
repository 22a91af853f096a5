/// \file
/// Common subexpressions of a graph merged.
///
/// Autograd records the backward of each forward op on its own, so a joint graph repeats work:
/// a matrix product's padding (rewrite/matmul_padding.h) of a gradient and of that gradient's
/// transpose transposed back (the same copy, 1.9 GB each for BERT's head in f32), a weight
/// transposed twice. `merge_common_subexpressions` keeps the first of each set of nodes with the
/// same op and the same arguments, reads its outputs where the others' were read, and reads
/// through a transpose of a transpose that gives back its input's layout. Nodes whose outputs are
/// the graph's are kept as they are (two outputs never become one tensor).
#pragma once

#include <functional>

#include "graph/graph.h"

namespace ember::graph {

/// `g` with its common subexpressions merged. `may_merge` says which nodes may be (deterministic,
/// no side effects: never a random op). Requires: a verified graph. Guarantees: the same inputs
/// (in order, kinds and names), outputs and mutations, in the same order; each kept node in its
/// order; the result passes the verifier.
Graph merge_common_subexpressions(const Graph& g,
                                  const std::function<bool(const Graph&, const Node&)>& may_merge);

}  // namespace ember::graph
