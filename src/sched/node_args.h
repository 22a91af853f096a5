/// \file
/// A node's arguments by schema name, and whether anything reads a value: what the index
/// functions of multi-output ops (batch_norm.h, pooling.h) ask of the graph.
#pragma once

#include <string_view>

#include "graph/graph.h"

namespace ember::sched {

/// The argument of `n` named `name` in its schema, or nullptr.
const graph::Arg* node_arg(const graph::Graph& g, const graph::Node& n, std::string_view name);

/// True when nothing reads `v`: no node argument, graph output or mutation.
bool value_unread(const graph::Graph& g, graph::ValueId v);

}  // namespace ember::sched
