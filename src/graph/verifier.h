/// \file
/// Checks the invariants stated in graph.h. Run between passes in tests, and after tracing.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace ember::graph {

/// Returns one message per broken invariant, in a deterministic order; empty when valid. Checks:
/// op indices in range; each op's kind is its name's (op_kind); argument count equals the op's
/// arg_names; every ValueRef names a value
/// defined earlier (SSA, no dangling values); each value defined exactly once, and Value::node /
/// Value::index agree with where it is defined; tensor types well formed (sizes and strides of
/// equal rank, sizes >= 0); outputs and mutations name defined values; mutations target inputs
/// that are not constants, with equal dtype and sizes.
std::vector<std::string> verify_graph(const Graph& g);

/// Throws InternalError listing every problem when `verify_graph` finds any.
void check_graph(const Graph& g);

}  // namespace ember::graph
