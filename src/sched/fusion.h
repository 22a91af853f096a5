/// \file
/// The fusion scheduler: partitions a traced Graph into steps, each an extern ATen call (one node)
/// or a generated kernel (a fused group of pointwise nodes), and builds each group's loop-IR
/// Kernel. The sched stage sees both IRs: it depends on graph and loop.
///
/// Today's scope (the first slice of the CPU compiler): vertical fusion of pointwise nodes of one
/// output shape, with broadcasting reads of realized inputs; reductions (softmax, layer_norm,
/// sum, var, argmax, ...) as one-node kernel groups (reduction.h). Views and everything else stay
/// extern calls. See docs/design/scheduler.md.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "loop/stmt.h"

namespace ember::sched {

/// A fused group of pointwise nodes, or one reduction node, and its kernel.
struct KernelGroup {
  std::vector<int32_t> nodes;          ///< graph nodes, in graph order
  std::vector<graph::ValueId> inputs;  ///< realized values read, in buffer order
  /// Values written, buffer order after the inputs: in node order, and for a node with several
  /// outputs (native_layer_norm) the needed ones in output order.
  std::vector<graph::ValueId> outputs;
  loop::Kernel kernel;  ///< buffers: inputs then outputs; no size variables
};

/// One step of the program: run node `index` as an ATen call, or run group `index`.
struct PlanStep {
  enum class Kind : uint8_t { Extern, Kernel };
  Kind kind = Kind::Extern;
  int32_t index = -1;
};

struct Plan {
  std::vector<KernelGroup> groups;
  std::vector<PlanStep> steps;
  int num_fused_nodes = 0;  ///< graph nodes inside kernels
};

struct ScheduleOptions {
  /// Outer loops of kernels with at least this many elements run in parallel (OpenMP).
  int64_t parallel_threshold = 32768;
  /// Whether to fuse at all; false gives a plan of extern steps only.
  bool fuse = true;
  /// Whether reductions (softmax, layer_norm, sum, ...) become kernels (reduction.h); false leaves
  /// them to ATen.
  bool reductions = true;
};

/// Requires a verifier-valid graph whose tensors are all on the CPU (kernels are C++). Guarantees:
/// every node is in exactly one step; steps are in an order where each reads only values defined
/// by earlier steps or graph inputs; a group's outputs are exactly its values used outside it
/// (by other steps, graph outputs or mutations). A group's kernel writes its outputs with the
/// traced sizes and strides and reads inputs at the traced strides (the runtime checks them).
Plan schedule_graph(const graph::Graph& g, const ScheduleOptions& options = {});

}  // namespace ember::sched
