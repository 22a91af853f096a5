/// \file
/// Kernel parameters for a fused group, shared by the pointwise (fusion.cpp) and reduction
/// (reduction.cpp) kernel builders.
#pragma once

#include <cstdint>
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

}  // namespace ember::sched
