/// \file
/// The scheduler's plans cached on disk, so that a second process compiling the same graph does
/// not schedule it again (issue 37's warm start). A plan is a pure function of the graph and the
/// ScheduleOptions, given the scheduler's code: the key hashes the graph (graph::hash_graph:
/// structure, types, strides, symbols and their hints), every option and the identity of the
/// library the scheduler is built into (its path, size, inode and modification time: any rebuild
/// is a new key, since ember's version string does not change between commits).
///
/// Entries live in `<cache_root()>/plans/<key>.plan` under the kernel cache's rules
/// (docs/design/cache.md): a trusted directory, published whole with a size-and-hash sidecar,
/// a missing or corrupted entry removed and scheduled again. An entry also records a second hash,
/// of the graph's printed text, checked on load, so two graphs whose keys collide never share a
/// plan. Plain data only: a plan is never code.
///
/// Only plans that took at least `min_seconds` to schedule are stored (CompileOptions::Sched::
/// plan_cache_min_seconds, 0.05 s): for a small graph, reading and parsing the plan back costs
/// about what scheduling it does. A stored plan is
/// parsed back and compared with the one scheduled (sched::same_plan) before it is published.
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "sched/fusion.h"

namespace ember::runtime {

/// sched::schedule_graph(g, options), from the plan cache when `enabled` and an entry exists
/// (its phase_seconds then hold one "schedule/from the plan cache" entry), else scheduled and
/// stored (when it took long enough). Never fails for the cache's sake: an unusable directory or
/// entry means scheduling as without it.
sched::Plan schedule_cached(const graph::Graph& g, const sched::ScheduleOptions& options,
                            bool enabled, double min_seconds);

struct PlanCacheStats {
  int64_t hits = 0;      ///< plans read back
  int64_t stored = 0;    ///< plans written
  int64_t rejected = 0;  ///< entries that failed a check (removed) or plans that did not round-trip
};
PlanCacheStats plan_cache_stats();

}  // namespace ember::runtime
