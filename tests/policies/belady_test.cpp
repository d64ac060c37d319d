#include "policies/belady.h"

#include <gtest/gtest.h>

#include <vector>

namespace vramspill::policies {
namespace {

TEST(BeladyTest, MatchesTheTextbookReferenceString) {
  // Silberschatz's reference string: the optimal replacement faults 9 times with 3 frames.
  const std::vector<BlockId> uses = {7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1};
  EXPECT_EQ(belady_misses(uses, 3), 9u);
  EXPECT_EQ(belady_misses(uses, 4), 8u);
}

TEST(BeladyTest, ColdMissesOnlyWhenEverythingFits) {
  const std::vector<BlockId> uses = {1, 2, 3, 1, 2, 3, 3, 2, 1};
  EXPECT_EQ(belady_misses(uses, 3), 3u);
}

TEST(BeladyTest, NoRoomMissesEveryUse) {
  const std::vector<BlockId> uses = {1, 1, 2};
  EXPECT_EQ(belady_misses(uses, 0), 3u);
  EXPECT_EQ(belady_misses({}, 2), 0u);
}

TEST(BeladyTest, KeepsTheBlockUsedSoonest) {
  // Room for 2. At the use of 3, block 1 comes back next and 2 never: evict 2.
  const std::vector<BlockId> uses = {1, 2, 3, 1, 3, 1};
  EXPECT_EQ(belady_misses(uses, 2), 3u);
}

}  // namespace
}  // namespace vramspill::policies
