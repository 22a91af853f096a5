#include "sched/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "support/error.h"

namespace ember::sched {

ArenaPlan plan_arena(const std::vector<BufferLifetime>& buffers, int64_t alignment) {
  EMBER_INTERNAL_ASSERT(alignment > 0) << "plan_arena: alignment " << alignment;
  ArenaPlan plan;
  plan.offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  auto round_up = [&](int64_t n) { return (n + alignment - 1) / alignment * alignment; };

  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    EMBER_INTERNAL_ASSERT(b.bytes >= 0 && b.first <= b.last)
        << "plan_arena: buffer " << i << " of " << b.bytes << " bytes, steps " << b.first << ".."
        << b.last;
    // The byte ranges of placed buffers alive at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      const BufferLifetime& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last) {
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + o.bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (offset + b.bytes <= start) break;  // fits in the gap before this range
      offset = std::max(offset, round_up(end));
    }
    plan.offsets[i] = offset;
    plan.total_bytes = std::max(plan.total_bytes, offset + b.bytes);
    placed.push_back(i);
  }
  plan.total_bytes = round_up(plan.total_bytes);
  return plan;
}

}  // namespace ember::sched
