#include "policies/lfu.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "policies/lru.h"

namespace vramspill::policies {
namespace {

using Blocks = std::vector<BlockId>;

constexpr uint64_t kHalfLife = LfuPolicy::kHalfLife;

LfuPolicy make_lfu(uint64_t capacity) { return LfuPolicy({capacity, InvariantMode::kAbort}); }

Blocks victims_for(EvictionPolicy& policy, uint64_t need, const Blocks& keep = {}) {
  return policy.choose_victims(need, keep).blocks;
}

TEST(LfuTest, KeepsABlockUsedOftenThoughNotRecently) {
  LfuPolicy lfu = make_lfu(8);
  LruPolicy lru({8, InvariantMode::kAbort});
  for (EvictionPolicy* policy : std::array<EvictionPolicy*, 2>{&lfu, &lru}) {
    for (BlockId block = 1; block <= 3; ++block) policy->allocated(block, 1, true);
    for (uint64_t sequence = 1; sequence <= 5; ++sequence) policy->used(sequence, 0, Blocks{1});
    policy->used(6, 0, Blocks{2});
    policy->used(7, 0, Blocks{3});
  }
  EXPECT_EQ(victims_for(lfu, 2), (Blocks{2, 3}));
  EXPECT_EQ(victims_for(lru, 2), (Blocks{1, 2}));
}

TEST(LfuTest, AgingLetsAnOldFavouriteGo) {
  LfuPolicy lfu = make_lfu(8);
  lfu.allocated(1, 1, true);
  lfu.allocated(2, 1, true);
  for (uint64_t sequence = 1; sequence <= 5; ++sequence) lfu.used(sequence, 0, Blocks{1});
  // Soon after, two uses do not outweigh five.
  lfu.used(101, 0, Blocks{2});
  lfu.used(102, 0, Blocks{2});
  EXPECT_EQ(victims_for(lfu, 1), Blocks{2});
  // Five half-lives later, block 1's five uses count as 5/32 of one, block 2's two as 2/32: two
  // more uses of block 2 now outweigh them.
  lfu.used(5 * kHalfLife, 0, Blocks{2});
  lfu.used(5 * kHalfLife + 1, 0, Blocks{2});
  EXPECT_EQ(victims_for(lfu, 1), Blocks{1});
}

TEST(LfuTest, TheOrderLaunchesAreReportedInDoesNotMatter) {
  LfuPolicy in_order = make_lfu(8);
  LfuPolicy reversed = make_lfu(8);
  for (LfuPolicy* lfu : {&in_order, &reversed}) {
    for (BlockId block = 1; block <= 3; ++block) lfu->allocated(block, 1, true);
  }
  const std::vector<Blocks> launches = {{1, 2}, {1}, {3, 3}, {2, 1}, {3}};
  for (uint64_t i = 0; i < launches.size(); ++i) {
    in_order.used(i + 1, 0, launches[i]);
    reversed.used(launches.size() - i, 1, launches[launches.size() - 1 - i]);
  }
  EXPECT_EQ(victims_for(in_order, 3), (Blocks{2, 3, 1}));
  EXPECT_EQ(victims_for(reversed, 3), victims_for(in_order, 3));
}

TEST(LfuTest, BringsInABlockOnceUsedAgainLately) {
  LfuPolicy lfu = make_lfu(8);
  lfu.allocated(1, 4, false);
  lfu.allocated(2, 9, false);
  // Touched once, long after its allocation: reached in place.
  lfu.used(5 * kHalfLife, 0, Blocks{1, 2});
  EXPECT_FALSE(lfu.should_promote(1));
  // Used again: brought in. A block larger than the budget never is.
  lfu.used(5 * kHalfLife + 1, 0, Blocks{1, 2});
  EXPECT_TRUE(lfu.should_promote(1));
  EXPECT_FALSE(lfu.should_promote(2));
}

TEST(LfuTest, ABlockPlacedOnTheHostAndTouchedOnceIsReachedInPlace) {
  // A hot block fills the device; a buffer placed on the host is touched once, then again.
  LfuPolicy lfu = make_lfu(4);
  lfu.allocated(1, 4, true);
  for (uint64_t sequence = 1; sequence <= 100; ++sequence) lfu.used(sequence, 0, Blocks{1});
  lfu.allocated(2, 2, false);
  lfu.used(101, 0, Blocks{2});
  EXPECT_FALSE(lfu.should_promote(2));
  lfu.used(102, 0, Blocks{2});
  EXPECT_TRUE(lfu.should_promote(2));
}

TEST(LfuTest, ABlockPlacedOnTheDeviceCountsItsAllocationAsAUse) {
  // So that it is not the first victim before the launch it was allocated for runs: whether it
  // was allocated there, or on the host and then moved in before any use (as the tiered layer and
  // the replay place a new block).
  for (const bool moved_in : {false, true}) {
    LfuPolicy lfu = make_lfu(8);
    lfu.allocated(1, 1, true);  // counted as used at sequence 0
    lfu.allocated(2, 1, false);
    lfu.used(1, 0, Blocks{2});
    lfu.allocated(3, 1, !moved_in);  // counted as used at sequence 1
    if (moved_in) lfu.moved(3, 1);
    EXPECT_EQ(victims_for(lfu, 1), Blocks{1}) << (moved_in ? "moved in" : "allocated there");
  }
}

}  // namespace
}  // namespace vramspill::policies
