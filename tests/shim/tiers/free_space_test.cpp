// tiers::FreeSpace: best fit, address order among equals, coalescing that stops at region bounds.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tiers/free_space.h"

namespace vramspill::tiers {
namespace {

TEST(FreeSpace, TakesTheSmallestRangeThatFitsFromItsLowEnd) {
  FreeSpace space;
  space.add(0x10000, 0x4000);
  space.add(0x20000, 0x1000);
  space.add(0x30000, 0x2000);
  EXPECT_EQ(space.take(0x1800), 0x30000u);  // 0x2000 is the best fit, not the first
  EXPECT_EQ(space.take(0x800), 0x30000u + 0x1800);
  EXPECT_EQ(space.take(0x1000), 0x20000u);
  EXPECT_EQ(space.take(0x5000), std::nullopt);
  EXPECT_EQ(space.take(0x4000), 0x10000u);
  EXPECT_EQ(space.free_bytes(), 0u);
  EXPECT_EQ(space.ranges(), 0u);
}

TEST(FreeSpace, PrefersTheLowestAddressAmongEqualFits) {
  FreeSpace space;
  space.add(0x50000, 0x1000);
  space.add(0x30000, 0x1000);
  space.add(0x40000, 0x1000);
  EXPECT_EQ(space.take(0x1000), 0x30000u);
  EXPECT_EQ(space.take(0x1000), 0x40000u);
}

TEST(FreeSpace, MergesWithBothNeighboursOnFree) {
  FreeSpace space;
  space.add(0, 0x3000);
  const uint64_t a = *space.take(0x1000);
  const uint64_t b = *space.take(0x1000);
  const uint64_t c = *space.take(0x1000);
  EXPECT_EQ(space.ranges(), 0u);
  const Range first = space.give_back(a, 0x1000, 0, 0x3000);
  EXPECT_EQ(first.start, 0u);
  EXPECT_EQ(first.bytes, 0x1000u);
  space.give_back(c, 0x1000, 0, 0x3000);
  EXPECT_EQ(space.ranges(), 2u);
  const Range merged = space.give_back(b, 0x1000, 0, 0x3000);
  EXPECT_EQ(merged.start, 0u);
  EXPECT_EQ(merged.bytes, 0x3000u);
  EXPECT_EQ(space.ranges(), 1u);
  EXPECT_EQ(space.largest(), 0x3000u);
  EXPECT_EQ(space.take(0x3000), 0u);  // the size index agrees with the address index
}

TEST(FreeSpace, NeverMergesAcrossAdjacentRegions) {
  FreeSpace space;
  space.add(0x0000, 0x1000);  // region A: [0, 0x1000)
  space.add(0x1000, 0x1000);  // region B: [0x1000, 0x2000), adjacent in the address space
  const uint64_t a = *space.take(0x1000);
  const uint64_t b = *space.take(0x1000);
  space.give_back(a, 0x1000, 0x0000, 0x1000);
  const Range back = space.give_back(b, 0x1000, 0x1000, 0x2000);
  EXPECT_EQ(back.start, 0x1000u);
  EXPECT_EQ(back.bytes, 0x1000u);
  EXPECT_EQ(space.ranges(), 2u);
  EXPECT_TRUE(space.remove(0x1000, 0x1000));  // region B can be unpinned alone
  EXPECT_FALSE(space.remove(0x0000, 0x2000));
  EXPECT_EQ(space.free_bytes(), 0x1000u);
}

// Random takes and frees over three regions against a byte map: blocks never overlap, free
// bytes always add up, and freeing everything leaves one range per region.
TEST(FreeSpace, StaysConsistentUnderRandomChurn) {
  constexpr uint64_t kRegion = 1 << 20;
  FreeSpace space;
  for (uint64_t r = 0; r < 3; ++r) space.add(r * kRegion, kRegion);
  std::map<uint64_t, uint64_t> live;
  uint64_t live_bytes = 0;
  std::mt19937_64 random(7);
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || random() % 3 != 0) {
      const uint64_t bytes = (random() % 64 + 1) * 256;
      if (const auto start = space.take(bytes)) {
        auto next = live.lower_bound(*start);
        ASSERT_TRUE(next == live.end() || next->first >= *start + bytes);
        if (next != live.begin()) {
          --next;
          ASSERT_LE(next->first + next->second, *start);
        }
        ASSERT_EQ(*start / kRegion, (*start + bytes - 1) / kRegion) << "block spans regions";
        live.emplace(*start, bytes);
        live_bytes += bytes;
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(random() % live.size()));
      const uint64_t region = it->first / kRegion * kRegion;
      space.give_back(it->first, it->second, region, region + kRegion);
      live_bytes -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(space.free_bytes() + live_bytes, 3 * kRegion);
  }
  for (const auto& [start, bytes] : live) {
    const uint64_t region = start / kRegion * kRegion;
    space.give_back(start, bytes, region, region + kRegion);
  }
  EXPECT_EQ(space.ranges(), 3u);
  EXPECT_EQ(space.largest(), kRegion);
}

}  // namespace
}  // namespace vramspill::tiers
