// tiers/move_plan: a batch of moves as a value (Note [A move plan]): each slot handed a granule
// of the kind it moves to, in the order that lets homes make runs, what the driver could not give
// dropping slots and what no slot took staying behind, and a description that names each run.
#include "tiers/move_plan.h"

#include <gtest/gtest.h>

namespace vramspill::tiers {
namespace {

constexpr CUdeviceptr kBlockA = 0x200000;
constexpr CUdeviceptr kBlockB = 0x800000;

Granule device(GranuleHandle handle, CUdeviceptr home = 0) {
  return {.handle = handle, .kind = GranuleKind::kDevice, .home = home};
}
Granule host(GranuleHandle handle, CUdeviceptr home = 0) {
  return {.handle = handle, .kind = GranuleKind::kHost, .home = home};
}
Slot slot(CUdeviceptr block, std::size_t index, Granule from, bool dead = false) {
  return {.block = block, .index = index, .from = from, .to = {}, .dead = dead};
}

TEST(MovePlanTest, PromotionsTakeDeviceGranulesAndEvictionsHostOnesInOrder) {
  MovePlan plan{.slots = {slot(kBlockA, 0, host(1)), slot(kBlockA, 1, host(2)),
                          slot(kBlockB, 4, device(3))},
                .fresh = {device(10, 0x40000000), device(11, 0x40200000), host(12, 0x60000000)},
                .moving = {kBlockA, kBlockB}};
  const std::vector<PieceShape> wanted = plan.wanted();
  ASSERT_EQ(wanted.size(), 3u);
  EXPECT_EQ(wanted[0].kind, GranuleKind::kDevice);
  EXPECT_EQ(wanted[1].kind, GranuleKind::kDevice);
  EXPECT_EQ(wanted[2].kind, GranuleKind::kHost);
  plan.hand_out();
  ASSERT_EQ(plan.slots.size(), 3u);
  EXPECT_EQ(plan.slots[0].to.handle, 10u) << "homes in order: the run's copy is one";
  EXPECT_EQ(plan.slots[1].to.handle, 11u);
  EXPECT_EQ(plan.slots[2].to.handle, 12u);
  EXPECT_TRUE(plan.fresh.empty());
}

TEST(MovePlanTest, WhatTheDriverCouldNotGiveDropsSlotsAndWhatNoSlotTookStays) {
  MovePlan plan{.slots = {slot(kBlockA, 0, host(1)), slot(kBlockA, 1, host(2))},
                .fresh = {device(10), host(12), host(13)},
                .moving = {kBlockA}};
  plan.hand_out();
  ASSERT_EQ(plan.slots.size(), 1u) << "one device granule for two promotions";
  EXPECT_EQ(plan.slots[0].index, 0u);
  EXPECT_EQ(plan.slots[0].to.handle, 10u);
  ASSERT_EQ(plan.fresh.size(), 2u) << "the host granules no eviction took";
  EXPECT_EQ(plan.fresh[0].handle, 12u);
  EXPECT_EQ(plan.fresh[1].handle, 13u);
}

TEST(MovePlanTest, DescribesEachRunOfABlockAndItsDirection) {
  const MovePlan plan{.slots = {slot(kBlockA, 0, host(1)), slot(kBlockA, 1, host(2)),
                                slot(kBlockA, 3, host(4)), slot(kBlockB, 4, device(3), true)},
                      .fresh = {},
                      .moving = {kBlockA, kBlockB}};
  EXPECT_EQ(plan.describe(),
            "4 granules of 2 blocks: 0x200000[0..1] to the device 0x200000[3..3] to the device "
            "0x800000[4..4] to the host (dead)");
}

}  // namespace
}  // namespace vramspill::tiers
