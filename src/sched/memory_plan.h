/// \file
/// Memory planning: places buffers with known sizes and lifetimes in one arena, so buffers whose
/// lifetimes do not overlap share memory. The runtime allocates one arena per call instead of one
/// allocation per kernel output (src/runtime/executor.h decides which buffers qualify and their
/// lifetimes).
#pragma once

#include <cstdint>
#include <vector>

namespace ember::sched {

/// A buffer of `bytes` bytes, alive from step `first` to step `last`, both included.
struct BufferLifetime {
  int64_t bytes = 0;
  int32_t first = 0;
  int32_t last = 0;
};

struct ArenaPlan {
  std::vector<int64_t> offsets;  ///< byte offset of each buffer in the arena
  int64_t total_bytes = 0;       ///< the arena's size
};

/// Requires bytes >= 0, first <= last, alignment > 0. Guarantees: buffers whose lifetimes overlap
/// occupy disjoint byte ranges; every offset is a multiple of `alignment`; total_bytes covers every
/// buffer. Greedy: the largest buffers are placed first, each at the lowest offset where it fits
/// among the already placed buffers that overlap it in time. Deterministic.
ArenaPlan plan_arena(const std::vector<BufferLifetime>& buffers, int64_t alignment = 64);

}  // namespace ember::sched
