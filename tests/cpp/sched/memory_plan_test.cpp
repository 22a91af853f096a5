#include "sched/memory_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace ember::sched {
namespace {

bool overlap_in_time(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first <= b.last && b.first <= a.last;
}

void expect_valid(const std::vector<BufferLifetime>& bufs, const ArenaPlan& plan, int64_t align) {
  ASSERT_EQ(plan.offsets.size(), bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_GE(plan.offsets[i], 0);
    EXPECT_EQ(plan.offsets[i] % align, 0);
    EXPECT_LE(plan.offsets[i] + bufs[i].bytes, plan.total_bytes);
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      if (!overlap_in_time(bufs[i], bufs[j]) || bufs[i].bytes == 0 || bufs[j].bytes == 0) continue;
      bool disjoint = plan.offsets[i] + bufs[i].bytes <= plan.offsets[j] ||
                      plan.offsets[j] + bufs[j].bytes <= plan.offsets[i];
      EXPECT_TRUE(disjoint) << "buffers " << i << " and " << j << " collide";
    }
  }
}

TEST(MemoryPlan, BuffersThatDoNotOverlapInTimeShareMemory) {
  // A chain: each buffer is read by the next step only.
  std::vector<BufferLifetime> bufs = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  ArenaPlan plan = plan_arena(bufs, 64);
  expect_valid(bufs, plan, 64);
  EXPECT_EQ(plan.total_bytes, 2 * 1024);  // two live at a time, each rounded to 1024
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
  EXPECT_EQ(plan.offsets[1], plan.offsets[3]);
}

TEST(MemoryPlan, SmallBufferFitsInAGap) {
  std::vector<BufferLifetime> bufs = {{4096, 0, 10}, {4096, 0, 2}, {4096, 0, 10}, {1000, 5, 6}};
  ArenaPlan plan = plan_arena(bufs, 64);
  expect_valid(bufs, plan, 64);
  EXPECT_EQ(plan.total_bytes, 3 * 4096);
  EXPECT_EQ(plan.offsets[3], plan.offsets[1]);  // reuses the dead buffer's range
}

TEST(MemoryPlan, EmptyAndZeroSized) {
  EXPECT_EQ(plan_arena({}, 64).total_bytes, 0);
  std::vector<BufferLifetime> bufs = {{0, 0, 0}, {8, 0, 0}};
  ArenaPlan plan = plan_arena(bufs, 64);
  expect_valid(bufs, plan, 64);
  EXPECT_EQ(plan.total_bytes, 64);
}

TEST(MemoryPlan, RandomLifetimesNeverCollideAndPlansAreDeterministic) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferLifetime> bufs;
    int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      int32_t first = static_cast<int32_t>(rng() % 30);
      int32_t last = first + static_cast<int32_t>(rng() % 10);
      bufs.push_back({static_cast<int64_t>(rng() % 5000), first, last});
    }
    ArenaPlan plan = plan_arena(bufs, 16);
    expect_valid(bufs, plan, 16);
    // Never worse than one buffer after another.
    int64_t sum = 0;
    for (const auto& b : bufs) sum += (b.bytes + 15) / 16 * 16;
    EXPECT_LE(plan.total_bytes, sum);
    EXPECT_EQ(plan_arena(bufs, 16).offsets, plan.offsets);
  }
}

}  // namespace
}  // namespace ember::sched
