#include "policies/lru.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "policies/belady.h"
#include "unit_simulation.h"

namespace vramspill::policies {
namespace {

using Blocks = std::vector<BlockId>;

LruPolicy make_lru(uint64_t capacity) { return LruPolicy({capacity, InvariantMode::kAbort}); }

Blocks victims_for(LruPolicy& lru, uint64_t need, const Blocks& keep = {}) {
  return lru.choose_victims(need, keep).blocks;
}

TEST(LruTest, EvictsTheLeastRecentlyUsed) {
  LruPolicy lru = make_lru(4);
  for (BlockId block = 0; block < 4; ++block) lru.allocated(block, 1, true);
  uint64_t sequence = 0;
  for (const BlockId block : Blocks{2, 0, 3, 1}) lru.used(++sequence, 0, Blocks{block});
  EXPECT_EQ(victims_for(lru, 1), Blocks{2});
  EXPECT_EQ(victims_for(lru, 2), (Blocks{2, 0}));
  EXPECT_EQ(victims_for(lru, 2, {2}), (Blocks{0, 3}));
  lru.used(++sequence, 1, Blocks{2});
  EXPECT_EQ(victims_for(lru, 1), Blocks{0});
}

TEST(LruTest, TiesGoByAllocationOrder) {
  LruPolicy lru = make_lru(8);
  for (const BlockId block : Blocks{10, 11, 12}) lru.allocated(block, 1, true);
  lru.used(1, 0, Blocks{12, 10, 11});
  lru.allocated(13, 1, true);  // never used: as recent as launch 1, allocated later
  EXPECT_EQ(victims_for(lru, 4), (Blocks{10, 11, 12, 13}));
}

TEST(LruTest, ANewBlockIsNotTheFirstVictim) {
  LruPolicy lru = make_lru(8);
  lru.allocated(1, 1, true);
  lru.allocated(2, 1, true);
  lru.used(1, 0, Blocks{1});
  lru.used(2, 0, Blocks{2});
  lru.allocated(3, 1, true);
  EXPECT_EQ(victims_for(lru, 1), Blocks{1});
}

TEST(LruTest, ALateReportDoesNotMakeABlockOlder) {
  LruPolicy lru = make_lru(8);
  lru.allocated(1, 1, true);
  lru.allocated(2, 1, true);
  lru.used(5, 0, Blocks{1});
  lru.used(4, 1, Blocks{2});
  lru.used(3, 2, Blocks{1});  // launch 3 of another stream, reported last
  EXPECT_EQ(victims_for(lru, 1), Blocks{2});
}

TEST(LruTest, TakesAsManyBlocksAsTheNeedAsksAndSkipsHostBlocks) {
  LruPolicy lru = make_lru(16);
  for (BlockId block = 1; block <= 4; ++block) lru.allocated(block, 2, true);
  lru.moved(1, 0);  // evicted: no longer a candidate
  EXPECT_EQ(victims_for(lru, 3), (Blocks{2, 3}));
  lru.moved(1, 1);  // partly back, with its old recency
  const Victims victims = lru.choose_victims(3, Blocks{});
  EXPECT_EQ(victims.blocks, (Blocks{1, 2}));
  EXPECT_EQ(victims.granules, 3u);
  EXPECT_TRUE(victims.enough);
}

TEST(LruTest, PromotesEveryBlockThatFitsTheBudget) {
  LruPolicy lru = make_lru(4);
  lru.allocated(1, 4, false);
  lru.allocated(2, 5, false);
  EXPECT_TRUE(lru.should_promote(1));
  EXPECT_FALSE(lru.should_promote(2));
  lru.set_capacity(5);
  EXPECT_TRUE(lru.should_promote(2));
  EXPECT_EQ(lru.stats().promotions_agreed, 2u);
  EXPECT_EQ(lru.stats().promotions_refused, 1u);
}

// The classic LRU failure, kept as a test so that it stays documented: a loop over one block
// more than fits evicts each block just before it comes round again, so every use misses, while
// the optimum keeps most of the loop on the device.
TEST(LruTest, ALoopLongerThanTheBudgetMissesEveryTime) {
  constexpr uint64_t kCapacity = 4;
  Launches launches;
  for (int round = 0; round < 20; ++round) {
    for (BlockId block = 0; block <= kCapacity; ++block) launches.push_back({block});
  }
  LruPolicy lru = make_lru(kCapacity);
  EXPECT_EQ(simulate_unit_misses(lru, kCapacity + 1, kCapacity, launches), launches.size());
  EXPECT_LT(belady_misses(flatten(launches), kCapacity), launches.size() / 3);
}

}  // namespace
}  // namespace vramspill::policies
