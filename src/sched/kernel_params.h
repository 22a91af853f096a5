/// \file
/// Kernel parameters for a fused group, shared by the pointwise (fusion.cpp) and reduction
/// (reduction.cpp) kernel builders.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "loop/stmt.h"
#include "sched/fusion.h"

namespace ember::sched {

/// The constant sizes of `t`.
std::vector<int64_t> sizes_of(const graph::TensorType& t);

/// Declares `group`'s buffers on `k`: its inputs (role Input), then its outputs (role Output),
/// named buf0, buf1, ... with the traced dtype, sizes and strides. Returns each value's buffer
/// name. Requires every value's dtype to have a loop-IR dtype.
std::map<graph::ValueId, std::string> add_group_buffers(const graph::Graph& g,
                                                        const KernelGroup& group, loop::Kernel& k);

/// Declares the b8[1] status buffer of a kernel that checks indices (KernelGroup::index_status)
/// as k's last buffer, and sets group.index_status.
void add_index_status(KernelGroup& group, loop::Kernel& k);

/// The serial loop nest that checks every element of an index tensor of type `t` (read by
/// `element` at an index over t's dims, as i64) against [-size, size) when `negative_wraps`, else
/// [0, size), accumulating "any out of range" into the one-element buffer `bad`. Dims of size 1 or
/// stride 0 (expanded) get no loop; loop variables are `<prefix><d>`, over t's sizes as size
/// expressions where they are symbolic. `size` is a constant or an expression over size
/// variables (the indexed dim of a tensor of symbolic sizes).
loop::Stmt index_range_check(
    const graph::TensorType& t,
    const std::function<loop::Expr(const std::vector<loop::Expr>&)>& element,
    const loop::Expr& size, bool negative_wraps, const std::string& prefix);

}  // namespace ember::sched
