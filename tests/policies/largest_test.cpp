#include "policies/largest.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "policies/lru.h"

namespace vramspill::policies {
namespace {

using Blocks = std::vector<BlockId>;

LargestPolicy make_largest(uint64_t capacity) {
  return LargestPolicy({capacity, InvariantMode::kAbort});
}

// Blocks 1..4 of 1, 2, 8 and 3 granules, used in id order: block 1 the least recent.
template <typename Policy>
void load_mixed_sizes(Policy& policy) {
  const uint64_t sizes[] = {1, 2, 8, 3};
  for (BlockId block = 1; block <= 4; ++block) policy.allocated(block, sizes[block - 1], true);
  for (BlockId block = 1; block <= 4; ++block) policy.used(block, 0, Blocks{block});
}

TEST(LargestTest, EvictsTheLargestBlockThatCoversTheNeed) {
  LargestPolicy largest = make_largest(16);
  LruPolicy lru({16, InvariantMode::kAbort});
  load_mixed_sizes(largest);
  load_mixed_sizes(lru);
  // One move where lru makes two.
  EXPECT_EQ(largest.choose_victims(3, Blocks{}).blocks, Blocks{3});
  EXPECT_EQ(lru.choose_victims(3, Blocks{}).blocks, (Blocks{1, 2}));
  // Without block 3, the next largest; a need none covers takes the fewest blocks that do.
  EXPECT_EQ(largest.choose_victims(3, Blocks{3}).blocks, Blocks{4});
  EXPECT_EQ(largest.choose_victims(5, Blocks{3}).blocks, (Blocks{4, 2}));
  EXPECT_EQ(lru.choose_victims(5, Blocks{3}).blocks, (Blocks{1, 2, 4}));
}

TEST(LargestTest, RanksByTheGranulesOnTheDevice) {
  LargestPolicy largest = make_largest(16);
  load_mixed_sizes(largest);
  largest.moved(3, 2);  // the mover took most of block 3 out already
  EXPECT_EQ(largest.choose_victims(3, Blocks{}).blocks, Blocks{4});
  largest.moved(3, 0);
  largest.moved(3, 8);
  EXPECT_EQ(largest.choose_victims(3, Blocks{}).blocks, Blocks{3});
}

TEST(LargestTest, EqualSizesGoByRecency) {
  LargestPolicy largest = make_largest(16);
  for (BlockId block = 1; block <= 3; ++block) largest.allocated(block, 2, true);
  largest.used(1, 0, Blocks{2});
  largest.used(2, 0, Blocks{1});
  EXPECT_EQ(largest.choose_victims(4, Blocks{}).blocks, (Blocks{3, 2}));
}

TEST(LargestTest, PromotesOnlyBlocksThatFitInHalfTheBudget) {
  LargestPolicy largest = make_largest(8);
  largest.allocated(1, 4, false);
  largest.allocated(2, 5, false);
  EXPECT_TRUE(largest.should_promote(1));
  EXPECT_FALSE(largest.should_promote(2));  // it would be the next victim
  largest.set_capacity(10);
  EXPECT_TRUE(largest.should_promote(2));
}

}  // namespace
}  // namespace vramspill::policies
