/// \file
/// Functional collectives in a graph (torch.distributed._functional_collectives, traced by the
/// capture: `_c10d_functional::all_reduce`, `all_gather_into_tensor`, `reduce_scatter_tensor`,
/// `all_to_all_single`, ... each followed by its `_c10d_functional::wait_tensor`). The executor
/// runs both as ATen calls through c10d's process group: the collective is issued (gloo's threads
/// or NCCL's stream do the work) and its wait blocks until the result is there. Nothing between
/// them needs the result, so the wait goes as late as the graph allows and the work in between
/// overlaps the communication (docs/design/distributed.md).
#pragma once

#include "graph/graph.h"
#include "tracer/trace_session.h"

namespace ember::runtime {

/// A collective that is issued and waited for later: a `_c10d_functional::` op other than
/// `wait_tensor` (its result is not ready until that wait).
bool is_collective(const graph::OpInfo& op);

/// `_c10d_functional::wait_tensor`.
bool is_collective_wait(const graph::OpInfo& op);

/// Rewrites `traced` in place: each collective moves to just after the last node it depends on
/// (the producers of the tensors it reads; the collective before it: collectives keep their
/// order, which every rank issues alike; and the node before the first use of that collective's
/// result: one collective's result at most is issued ahead of the work that uses it), so that its
/// communication starts as soon as its input exists and overlaps the work the program put before
/// it (a gradient's all-reduce issued when the gradient is made, not where the program wrote the
/// call), without gathering every layer's weights at the top of a graph. Waits stay where they are
/// (sink_collective_waits moves them). Guarantees: the same nodes and values, every value still
/// defined before it is read, the relative order of all other nodes unchanged; the graph passes
/// the verifier. Returns the number of collectives moved.
int hoist_collectives(tracer::TracedGraph& traced);

/// Rewrites `traced` in place: each wait_tensor node moves to just before the first node that
/// reads its result (after the last node, when only the graph's outputs or mutations read it).
/// Collectives keep their places and their order (every rank issues them in the same order).
/// Guarantees: the same nodes and values, every value still defined before it is read, the
/// relative order of all other nodes unchanged; the graph passes the verifier. Returns the
/// number of waits moved.
int sink_collective_waits(tracer::TracedGraph& traced);

}  // namespace ember::runtime
