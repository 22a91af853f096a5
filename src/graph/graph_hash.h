/// \file
/// A structural hash of a Graph, for caches: equal for structurally equal graphs, and stable
/// across processes. Structural equality is slightly finer than printing the same: the whole op
/// table (positional arg names, op order) and ValueList::optional_items count too. Input names
/// are not part of it; constants contribute their types only (their owner adds content if it
/// needs to).
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace ember::graph {

uint64_t hash_graph(const Graph& g);

}  // namespace ember::graph
