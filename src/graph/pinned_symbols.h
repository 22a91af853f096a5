/// \file
/// Symbols pinned to a constant by a size guard (`s2 == 32`, GuardRecorder) folded into the
/// graph: every node's result sizes, strides and offsets and every symbolic int argument,
/// simplified over the graph's ShapeEnv, so kernels and passes see the constant.
#pragma once

#include "graph/graph.h"

namespace ember::graph {

/// Rewrites the types and args of `g`'s nodes (not of its inputs: the runtime binds each symbol
/// from an input's size and checks the guard that pinned it) with sym::simplify. A symbolic
/// argument that becomes constant takes the constant form (`int_arg`, `int_list_arg`).
///
/// Guarantees: at every binding the guards admit, each folded expression has the value it had.
/// A graph without pinned symbols is unchanged.
void fold_pinned_symbols(Graph& g);

/// The types of `g`'s inputs folded as fold_pinned_symbols folds the nodes' (`f32[s0, s2]` with
/// s2 pinned to 32 becomes `f32[s0, 32]`), for the compiler once it found where each unpinned
/// symbol is bound (runtime::symbol_sources): a pinned symbol needs no source, its value is its
/// constant, and the input check compares the size with it, as the guard that pinned it does.
void fold_pinned_inputs(Graph& g);

/// `dims` simplified over `env` (a pinned symbol as its constant), constants as they are.
Dims fold_pinned(const Dims& dims, const sym::ShapeEnv& env);

}  // namespace ember::graph
