// placement/promotion_admission (Note [Admitting a promotion]): free room is always taken, a
// promotion that evicts must be used more than its victims, byte for byte, by the bytes the move
// crosses, counts fade with a half-life, and a freed block is forgotten.
#include "placement/promotion_admission.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace vramspill::placement {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBlock = 2 * kMiB;

using Victims = std::vector<PromotionAdmission::Victim>;

class PromotionAdmissionTest : public ::testing::Test {
 protected:
  // `block` used by `launches` launches in a row, from the next sequence on.
  void use(uint64_t block, int launches = 1) {
    for (int i = 0; i < launches; ++i) admission_.used(block, ++sequence_);
  }

  PromotionAdmission admission_;
  uint64_t sequence_ = 0;
};

TEST_F(PromotionAdmissionTest, FreeRoomIsAlwaysTaken) {
  EXPECT_TRUE(admission_.admits(1, kBlock, {}));  // not even used yet
}

TEST_F(PromotionAdmissionTest, ANewBlockDisplacesNothing) {
  EXPECT_FALSE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));  // neither ever used
  use(1, 8);
  EXPECT_FALSE(admission_.admits(3, 64 * kBlock, Victims{{1, kBlock}}));
}

// The bytes in and out are two crossings: a block used twice as often as its victim, with one
// use each lately, does not pay for them; four times, it does.
TEST_F(PromotionAdmissionTest, TheMoveMustBePaidFor) {
  use(2);
  use(1, 2);
  EXPECT_FALSE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));
  use(1, 2);
  EXPECT_TRUE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));
}

// A block's in-place cost is its bytes: a small hot block does not displace a big block used
// nearly as often, and a big one displaces small ones it outweighs.
TEST_F(PromotionAdmissionTest, CountsAreWeighedByBytes) {
  use(3);
  use(2, 4);
  use(1, 5);
  EXPECT_FALSE(admission_.admits(1, kBlock, Victims{{2, 4 * kBlock}}));
  EXPECT_TRUE(admission_.admits(2, 4 * kBlock, Victims{{1, kBlock}}));
  EXPECT_FALSE(admission_.admits(2, 4 * kBlock, Victims{{1, kBlock}, {3, 4 * kBlock}}))
      << "the victims' counts and bytes add up";
}

// In a loop over more than fits, each block on the host was last used before any a recency
// policy would evict: the loop settles, nothing moves.
TEST_F(PromotionAdmissionTest, ALoopDisplacesNothing) {
  for (int step = 0; step < 20; ++step) {
    for (uint64_t block = 1; block <= 3; ++block) {
      if (step > 0) {
        // The block lru would evict: the one used longest ago, after this one last was.
        const uint64_t oldest_other = block == 3 ? 1 : block + 1;
        EXPECT_FALSE(admission_.admits(block, kBlock, Victims{{oldest_other, kBlock}}))
            << "step " << step << ", block " << block;
      }
      use(block);
    }
  }
}

TEST_F(PromotionAdmissionTest, UsesFadeWithAHalfLife) {
  use(1, 6);
  use(2, 3);
  EXPECT_TRUE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));
  // Long after, block 2 used 3 times again: block 1's six uses count for less than one now.
  sequence_ += static_cast<uint64_t>(4 * PromotionAdmission::kHalfLife);
  use(2, 3);
  EXPECT_FALSE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));
  EXPECT_TRUE(admission_.admits(2, kBlock, Victims{{1, kBlock}}));
}

TEST_F(PromotionAdmissionTest, ALaunchReportedLateStillCounts) {
  use(2, 2);
  sequence_ += 10;
  admission_.used(1, sequence_);
  admission_.used(1, sequence_ - 1);
  admission_.used(1, sequence_ - 2);
  admission_.used(1, sequence_ - 3);
  EXPECT_TRUE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));
}

TEST_F(PromotionAdmissionTest, AFreedBlockIsForgotten) {
  use(1, 8);
  admission_.forget(1);
  // A new block at the same address starts with no uses.
  EXPECT_FALSE(admission_.admits(1, kBlock, Victims{{2, kBlock}}));
}

}  // namespace
}  // namespace vramspill::placement
