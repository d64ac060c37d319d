// The granule arena's pools (tiers/granule_pools.h): which pooled handles a copy in flight may
// still use (Note [Moves copied on the stream] in tiers/granule_arena.h).
#include "tiers/granule_pools.h"

#include <gtest/gtest.h>

#include <vector>

namespace vramspill::tiers {
namespace {

Granule single(GranuleHandle handle) { return {.handle = handle, .kind = GranuleKind::kDevice}; }

// take() hands out the last handle, an unsettled one while there are any: what stays unsettled
// is one fewer, so the settled handles stay free for what may not wait for copies (a trim).
TEST(GranulePoolsTest, TakingAnUnsettledHandleLeavesTheSettledOnesSettled) {
  GranulePools pools;
  pools.put(single(1), /*unsettled=*/false);
  pools.put(single(2), /*unsettled=*/false);
  pools.put(single(3), /*unsettled=*/true);
  ASSERT_EQ(pools.unsettled_granules(GranuleKind::kDevice), 1u);
  EXPECT_EQ(pools.take(GranuleKind::kDevice, 1)->handle, 3u);
  EXPECT_EQ(pools.unsettled_granules(GranuleKind::kDevice), 0u);
  std::vector<Granule> trimmed;
  pools.trim_to(GranuleKind::kDevice, 0, /*at_least=*/false, trimmed);
  EXPECT_EQ(trimmed.size(), 2u) << "a settled handle was held back as if a copy used it";
}

TEST(GranulePoolsTest, OnlyTheLastPiecesAreUnsettled) {
  GranulePools pools;
  pools.put(single(1), /*unsettled=*/false);
  pools.put(single(2), /*unsettled=*/true);
  pools.put(single(3), /*unsettled=*/true);
  EXPECT_EQ(pools.take(GranuleKind::kDevice, 1)->handle, 3u);
  EXPECT_EQ(pools.unsettled_granules(GranuleKind::kDevice), 1u) << "handle 2 still is";
  std::vector<Granule> trimmed;
  pools.trim_to(GranuleKind::kDevice, 0, /*at_least=*/false, trimmed);
  ASSERT_EQ(trimmed.size(), 1u);
  EXPECT_EQ(trimmed.front().handle, 1u);
}

}  // namespace
}  // namespace vramspill::tiers
