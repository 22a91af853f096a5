/// \file
/// A node's arguments by schema name, and whether anything reads a value: what the index
/// functions of multi-output ops (batch_norm.h, pooling.h) ask of the graph.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include "graph/graph.h"

namespace ember::sched {

/// The argument of `n` named `name` in its schema, or nullptr.
const graph::Arg* node_arg(const graph::Graph& g, const graph::Node& n, std::string_view name);

/// An int[2] argument given as one or two ints (a convolution's or pool's stride, padding,
/// dilation; torch's expand_param_if_needed): the pair, `empty` for an empty list, nullopt for
/// anything else (absent, not an int list, more than two).
std::optional<std::pair<int64_t, int64_t>> int_pair_arg(
    const graph::Arg* a, std::optional<std::pair<int64_t, int64_t>> empty = std::nullopt);

/// True when nothing reads `v`: no node argument, graph output or mutation.
bool value_unread(const graph::Graph& g, graph::ValueId v);

}  // namespace ember::sched
