// placement/prefetch_placement over fake prefetch calls, fake budgets and the real lru policy
// (Note [The prefetch mover]): blocks come in while the budget and the card allow, a launch
// promotes what it touches after the blocks' last uses and its stream waits for the prefetches,
// evictions are prefetches to the host after the victims' last uses, nothing moves during a
// capture, and the books follow only what the driver accepted.
#include "placement/prefetch_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <future>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fake_tiered_budgets.h"
#include "prefetch_fakes.h"
#include "tiers/granule_ops.h"

namespace vramspill::placement {
namespace {

using tiers::kGranuleBytes;

constexpr uint64_t kBlock = 2 * kGranuleBytes;  // 4 MiB

class PrefetchPlacementTest : public ::testing::Test {
 protected:
  PrefetchPlacementTest() : placement_(budgets_, devices_, options()) {}

  static TieredOptions options() {
    return {.policy = "lru", .invariant_mode = policies::InvariantMode::kAbort};
  }

  CUdeviceptr allocate(uint64_t bytes = kBlock, std::optional<RuleAction> rule = std::nullopt) {
    CUdeviceptr base = 0;
    EXPECT_EQ(placement_.allocate(0, bytes, &base, rule), CUDA_SUCCESS);
    return base;
  }

  void launch(uint64_t stream, std::initializer_list<CUdeviceptr> blocks) {
    launch_on(placement_, stream, blocks);
  }
  void launch_on(PrefetchPlacement& placement, uint64_t stream,
                 std::initializer_list<CUdeviceptr> blocks) {
    core::SubmissionUse use;
    use.sequence = ++sequence_;
    use.stream = stream;
    for (const CUdeviceptr block : blocks) use.blocks[use.count++] = block;
    placement.before_submission(use);
  }

  // Whether the books have pages of the block at `base` on the device.
  static bool on_device_in(const PrefetchPlacement& placement, CUdeviceptr base) {
    return placement.device_bytes(base).value() != 0;
  }
  bool on_device(CUdeviceptr base) { return on_device_in(placement_, base); }
  // Launches on `block` from `stream` until admission lets it in (Note [Admitting a promotion]):
  // how many it took, 0 if ten were not enough. The prefetches kept are the last launch's.
  int launch_until_promoted(uint64_t stream, CUdeviceptr block) {
    for (int launches = 1; launches <= 10; ++launches) {
      ops().prefetches.clear();
      launch(stream, {block});
      if (on_device(block)) return launches;
    }
    return 0;
  }
  FakePrefetchOps& ops() { return devices_.fake(); }
  // [tiered] admission = "always", with lru.
  static TieredOptions always_options() {
    return {.policy = "lru",
            .admission = TieredAdmission::kAlways,
            .invariant_mode = policies::InvariantMode::kAbort};
  }
  // Three blocks of `placement`, one more than the budget holds.
  static std::array<CUdeviceptr, 3> three_blocks_in(PrefetchPlacement& placement) {
    std::array<CUdeviceptr, 3> blocks{};
    for (CUdeviceptr& block : blocks) EXPECT_EQ(placement.allocate(0, kBlock, &block), CUDA_SUCCESS);
    return blocks;
  }

  FakeBudgets budgets_{2 * kBlock, 64 * kBlock};
  FakeDevices devices_;
  PrefetchPlacement placement_;
  uint64_t sequence_ = 0;
};

// Note [The policy's capacity] in placement/tiered_placement.h: a launch tells the policy the room
// there is now. Here another allocation held half the budget when the block was made, and has
// given it back since: lru, told the old capacity, refused to bring in a block larger than it.
TEST_F(PrefetchPlacementTest, ALaunchDecidesWithTheRoomThereIsNow) {
  PrefetchPlacement always(budgets_, devices_, always_options());
  ASSERT_TRUE(budgets_.take_device(0, kBlock));  // another allocation's
  CUdeviceptr block = 0;
  ASSERT_EQ(always.allocate(0, 2 * kBlock, &block), CUDA_SUCCESS);
  budgets_.give_device(0, kBlock);  // freed
  ASSERT_EQ(always.device_bytes(block).value(), 0u) << "the premise: it did not fit";
  const uint64_t refused = always.stats().promotions_refused;
  launch_on(always, 1, {block});
  EXPECT_EQ(always.device_bytes(block).value(), 2 * kBlock);
  EXPECT_EQ(always.stats().promotions_refused, refused);
}

// A new block has no uses to outweigh any other's (Note [Admitting a promotion]): it takes free
// room only, as managed mode places its blocks.
TEST_F(PrefetchPlacementTest, NewBlocksTakeFreeRoomOnly) {
  const CUdeviceptr first = allocate();
  const CUdeviceptr second = allocate();
  EXPECT_TRUE(on_device(first));
  EXPECT_TRUE(on_device(second));
  EXPECT_EQ(budgets_.device(), 2 * kBlock);
  launch(5, {second});  // first is now the least recently used
  const CUdeviceptr third = allocate();
  EXPECT_TRUE(on_device(first));
  EXPECT_FALSE(on_device(third));
  EXPECT_EQ(budgets_.device(), 2 * kBlock);
  EXPECT_EQ(budgets_.host(), 3 * kBlock);  // a managed page may be on the host at any time
  const std::vector<Prefetch> expected = {{first, kBlock, true, {}}, {second, kBlock, true, {}}};
  EXPECT_EQ(ops().prefetches, expected);
  EXPECT_EQ(placement_.stats().not_admitted, 1u);
}

// A loop over more than fits: what lru would evict was always used after the block on the host,
// so nothing is admitted and the blocks are read where they are, as in managed mode, where every
// use would have cost a move in and a move out.
TEST_F(PrefetchPlacementTest, ALoopOverMoreThanFitsMovesNothing) {
  const CUdeviceptr blocks[] = {allocate(), allocate(), allocate()};
  const std::size_t placed = ops().prefetches.size();
  for (int step = 0; step < 10; ++step) {
    for (const CUdeviceptr block : blocks) launch(1, {block});
  }
  EXPECT_EQ(ops().prefetches.size(), placed);
  EXPECT_EQ(placement_.stats().evictions, 0u);
  EXPECT_EQ(placement_.stats().not_admitted, 11u);  // the third's allocation, and each launch
  EXPECT_FALSE(on_device(blocks[2]));
}

// Note [Rules before the policy] in placement/tiered_placement.h, with this mover.
// [tiered] admission = "always": lru's promotion on use is made at the first use.
TEST_F(PrefetchPlacementTest, WithAdmissionAlwaysEveryPromotionThePolicyAsksForIsMade) {
  PrefetchPlacement always(budgets_, devices_, always_options());
  const std::array<CUdeviceptr, 3> blocks = three_blocks_in(always);
  EXPECT_TRUE(on_device_in(always, blocks[2])) << "a new block evicts the coldest";
  EXPECT_FALSE(on_device_in(always, blocks[0]));
  launch_on(always, 3, {blocks[0]});
  EXPECT_TRUE(on_device_in(always, blocks[0]));
  EXPECT_EQ(always.stats().not_admitted, 0u);
  for (const CUdeviceptr block : blocks) EXPECT_EQ(always.free(block), CUDA_SUCCESS);
}

TEST_F(PrefetchPlacementTest, APinnedBlockIsNeverEvicted) {
  const CUdeviceptr pinned = allocate(kBlock, RuleAction::kPin);
  const CUdeviceptr b = allocate();
  const CUdeviceptr c = allocate();  // on the host: no room
  launch(5, {b});  // the pinned block is the least recently used: lru's victim but for the rule
  ASSERT_NE(launch_until_promoted(9, c), 0);
  EXPECT_TRUE(on_device(pinned));
  EXPECT_FALSE(on_device(b));
  EXPECT_TRUE(on_device(c));
  EXPECT_FALSE(placement_.make_device_room(0, 2 * kBlock)) << "room made by evicting the pin";
  EXPECT_TRUE(on_device(pinned));
}

TEST_F(PrefetchPlacementTest, APreferHostBlockStaysOnTheHost) {
  const CUdeviceptr on_host = allocate(kBlock, RuleAction::kPreferHost);
  EXPECT_FALSE(on_device(on_host)) << "brought in although a rule prefers the host";
  EXPECT_EQ(budgets_.device(), 0u);
  launch(3, {on_host});
  EXPECT_FALSE(on_device(on_host));
  EXPECT_TRUE(ops().prefetches.empty());
  EXPECT_EQ(placement_.stats().promotions_refused, 1u);
}

TEST_F(PrefetchPlacementTest, EvictFirstBlocksGiveRoomBeforeThePolicyChooses) {
  const CUdeviceptr first = allocate(kBlock, RuleAction::kEvictFirst);
  const CUdeviceptr b = allocate();
  const CUdeviceptr c = allocate();  // on the host: no room
  launch(5, {first});  // lru would now evict b
  ASSERT_NE(launch_until_promoted(9, c), 0);
  EXPECT_FALSE(on_device(first));
  EXPECT_TRUE(on_device(b));
  EXPECT_TRUE(on_device(c));
}

TEST_F(PrefetchPlacementTest, APromotionWaitsForTheVictimsLastUsesAndTheLaunchWaitsForIt) {
  const CUdeviceptr a = allocate();
  const CUdeviceptr b = allocate();
  const CUdeviceptr c = allocate();  // on the host: no room
  ASSERT_FALSE(on_device(c));
  ops().done = true;  // the mover's streams ran: a and b are in
  launch(7, {b});
  launch(8, {b});
  launch(8, {a});
  // c, read in place launch after launch, comes to outweigh b, the coldest, and the move.
  const int launches = launch_until_promoted(9, c);
  ASSERT_NE(launches, 0);
  EXPECT_GT(launches, 1);
  const std::vector<Prefetch> expected = {{b, kBlock, false, {7, 8}}, {c, kBlock, true, {9}}};
  EXPECT_EQ(ops().prefetches, expected);
  EXPECT_EQ(ops().ordered_streams, std::vector<uint64_t>{9});
  EXPECT_FALSE(on_device(b));
  EXPECT_TRUE(on_device(a));
  EXPECT_EQ(budgets_.device(), 2 * kBlock);
  const PrefetchStats stats = placement_.stats();
  EXPECT_EQ(stats.promotions, 3u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.not_admitted, static_cast<uint64_t>(launches));  // c's allocation, its launches
}

// Note [Two lanes]: a promotion overlaps the evictions that make its room in the budget while the
// card has room for it without them, and waits for them when it has not.
TEST_F(PrefetchPlacementTest, APromotionWaitsForTheEvictionsOnlyWhenTheCardNeedsTheirRoom) {
  const CUdeviceptr a = allocate();
  const CUdeviceptr b = allocate();
  const CUdeviceptr c = allocate();  // on the host: no room
  launch(1, {b});
  ops().done = true;         // the allocations' promotions have run
  ops().free = kBlock / 2;  // the card, not only the budget, needs a's room
  for (int i = 0; i < 10 && !on_device(c); ++i) {
    ops().prefetches.clear();
    launch(2, {c});
  }
  ASSERT_TRUE(on_device(c));
  std::vector<Prefetch> expected = {{a, kBlock, false, {}}, {c, kBlock, true, {2}, true}};
  EXPECT_EQ(ops().prefetches, expected);
  // With room on the card, the next promotion does not wait for its victim's eviction.
  ops().free = 64 * kBlock;
  for (int i = 0; i < 10 && !on_device(a); ++i) {
    ops().prefetches.clear();
    launch(3, {a});
  }
  ASSERT_TRUE(on_device(a));
  expected = {{b, kBlock, false, {1}}, {a, kBlock, true, {3}, false}};
  EXPECT_EQ(ops().prefetches, expected);
}

TEST_F(PrefetchPlacementTest, ALaunchOfBlocksAlreadyInWaitsForNothing) {
  const CUdeviceptr a = allocate();
  ops().prefetches.clear();
  ops().done = true;
  launch(3, {a});
  EXPECT_TRUE(ops().prefetches.empty());
  EXPECT_TRUE(ops().ordered_streams.empty());
}

// Note [Launches after a promotion]
TEST_F(PrefetchPlacementTest, EveryLaunchOnABlockStillArrivingWaitsForTheMover) {
  const CUdeviceptr a = allocate();  // brought in at its allocation, with no launch at hand
  ASSERT_FALSE(ops().done);
  launch(3, {a});
  launch(4, {a});  // another stream
  EXPECT_EQ(ops().ordered_streams, (std::vector<uint64_t>{3, 4}));
  ops().done = true;
  launch(5, {a});
  ops().done = false;  // a later prefetch of another block: a is in all the same
  launch(6, {a});
  EXPECT_EQ(ops().ordered_streams, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(ops().prefetches.size(), 1u);
}

// Note [Promoting ahead] in policies/eviction_policy.h, with this mover: once learned has locked
// on a loop, what the next launches need is prefetched into the room a block the loop never uses
// held, and the launch at hand does not wait for it.
TEST_F(PrefetchPlacementTest, LearnedPrefetchesAheadWhatTheNextLaunchesNeed) {
  FakeBudgets budgets{4 * kBlock, 64 * kBlock};
  PrefetchPlacement learned(budgets, devices_,
                            {.policy = "learned", .invariant_mode = policies::InvariantMode::kAbort});
  std::vector<CUdeviceptr> loop;
  for (int i = 0; i < 5; ++i) {  // 10 granules on 8
    CUdeviceptr base = 0;
    ASSERT_EQ(learned.allocate(0, kBlock, &base), CUDA_SUCCESS);
    loop.push_back(base);
  }
  const auto turn = [&] {
    for (const CUdeviceptr block : loop) launch_on(learned, 1, {block});
  };
  for (int round = 0; round < 5; ++round) turn();  // locked after a window of 16 launches
  ASSERT_EQ(learned.stats().promoted_ahead, 0u) << "no room nothing needed holds, yet";
  CUdeviceptr cold = 0;  // never used: loop blocks go for it
  ASSERT_EQ(learned.allocate(0, 2 * kBlock, &cold), CUDA_SUCCESS);
  ASSERT_TRUE(on_device_in(learned, cold));
  ops().done = true;
  ops().ordered_streams.clear();
  turn();
  EXPECT_GE(learned.stats().promoted_ahead, 1u);
  EXPECT_FALSE(on_device_in(learned, cold)) << "its room went to the loop";
  for (const CUdeviceptr block : loop) EXPECT_EQ(learned.free(block), CUDA_SUCCESS);
  EXPECT_EQ(learned.free(cold), CUDA_SUCCESS);
}

// Nor does it ask whether the mover is done: on a GPU that query would break a capture in
// global mode.
TEST_F(PrefetchPlacementTest, ACapturedLaunchDoesNotWaitForTheMover) {
  const CUdeviceptr a = allocate();
  devices_.moves = false;  // a capture is in progress
  const int queries = ops().queries;
  launch(3, {a});
  EXPECT_TRUE(ops().ordered_streams.empty());
  EXPECT_EQ(ops().queries, queries);
}

TEST_F(PrefetchPlacementTest, ThePromotionsStillQueuedCountAgainstTheCardsFreeMemory) {
  // The budget would take three blocks, the card has room for one beyond the one queued.
  FakeBudgets roomy{8 * kBlock, 64 * kBlock};
  PrefetchPlacement placement(roomy, devices_, options());
  ops().free = 2 * kBlock;
  CUdeviceptr first = 0;
  CUdeviceptr second = 0;
  CUdeviceptr third = 0;
  ASSERT_EQ(placement.allocate(0, kBlock, &first), CUDA_SUCCESS);
  ASSERT_EQ(placement.allocate(0, kBlock, &second), CUDA_SUCCESS);
  ASSERT_EQ(placement.allocate(0, kBlock, &third), CUDA_SUCCESS);
  EXPECT_TRUE(on_device_in(placement, first));
  EXPECT_TRUE(on_device_in(placement, second));
  EXPECT_FALSE(on_device_in(placement, third));
  EXPECT_EQ(placement.stats().held_by_the_card, 1u);
  EXPECT_EQ(roomy.device(), 2 * kBlock);
  // Once the mover's stream is idle, the driver's figure is the whole truth.
  ops().done = true;
  ops().free = kBlock;
  core::SubmissionUse use;
  use.sequence = 1;
  use.stream = 4;
  use.blocks[use.count++] = third;
  placement.before_submission(use);
  EXPECT_TRUE(on_device_in(placement, third));
}

TEST_F(PrefetchPlacementTest, NothingMovesDuringACapture) {
  const CUdeviceptr a = allocate();
  ASSERT_TRUE(placement_.make_device_room(0, 2 * kBlock));  // a leaves for the host
  ASSERT_FALSE(on_device(a));
  ops().prefetches.clear();
  devices_.moves = false;
  launch(2, {a});
  EXPECT_FALSE(on_device(a));
  EXPECT_TRUE(ops().prefetches.empty());
  EXPECT_EQ(budgets_.device(), 0u);
  devices_.moves = true;
  launch(2, {a});
  EXPECT_TRUE(on_device(a));
  EXPECT_EQ(ops().ordered_streams, std::vector<uint64_t>{2});
}

// Note [Managed memory and captures begun meanwhile]: a global-mode capture forbids
// cuMemAllocManaged, so no block is made while one is in progress; the caller gives the
// allocation to the remap mover.
TEST_F(PrefetchPlacementTest, NoBlockIsMadeDuringACapture) {
  devices_.moves = false;
  CUdeviceptr base = 0;
  EXPECT_EQ(placement_.allocate(0, kBlock, &base), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(base, 0u);
  EXPECT_EQ(budgets_.host(), 0u) << "the host limit was charged for nothing";
  devices_.moves = true;
  EXPECT_NE(allocate(), 0u);
}

TEST_F(PrefetchPlacementTest, APrefetchTheDriverRefusesLeavesTheBlockWhereItWas) {
  ops().fail_promotions = true;
  const CUdeviceptr a = allocate();
  EXPECT_FALSE(on_device(a));
  launch(1, {a});
  EXPECT_FALSE(on_device(a));
  EXPECT_EQ(budgets_.device(), 0u);
  EXPECT_TRUE(ops().ordered_streams.empty());
  EXPECT_EQ(placement_.stats().failed_prefetches, 2u);
}

TEST_F(PrefetchPlacementTest, AFreeWaitsForQueuedPrefetchesAndGivesBothBudgetsBack) {
  const CUdeviceptr a = allocate(3 * kGranuleBytes / 2);  // 3 MiB: two whole pages
  EXPECT_EQ(ops().prefetches.back().size, 3 * kGranuleBytes / 2);
  EXPECT_EQ(budgets_.device(), kBlock);
  ASSERT_EQ(placement_.free(a), CUDA_SUCCESS);
  EXPECT_EQ(ops().waits, 1);
  EXPECT_EQ(ops().released, std::vector<CUdeviceptr>{a});
  EXPECT_EQ(budgets_.device(), 0u);
  EXPECT_EQ(budgets_.host(), 0u);
  EXPECT_FALSE(placement_.device_bytes(a).has_value());
  EXPECT_FALSE(placement_.free(a).has_value());  // no longer this placement's
}

// Note [A free waits outside the lock]: while a free waits for the mover's streams, another
// thread's launches go on, and one that names the block being freed moves nothing.
TEST_F(PrefetchPlacementTest, AFreeWaitsForTheMoverWithoutHoldingOtherThreadsLaunches) {
  PrefetchPlacement always(budgets_, devices_, always_options());
  const std::array<CUdeviceptr, 3> blocks = three_blocks_in(always);
  ASSERT_FALSE(on_device_in(always, blocks[0])) << "the coldest, evicted by the third";
  bool others_went_on = false;
  uint64_t charged_meanwhile = 0;
  std::future<void> other;
  ops().while_waiting = [&] {
    // Without the lock held, this thread's launches run while the free waits.
    other = std::async(std::launch::async, [&] {
      launch_on(always, 5, {blocks[1]});
      launch_on(always, 5, {blocks[0]});  // the block being freed: lru would promote it
    });
    others_went_on = other.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    charged_meanwhile = budgets_.host();
  };
  const std::size_t prefetches_before = ops().prefetches.size();
  ASSERT_EQ(always.free(blocks[0]), CUDA_SUCCESS);
  other.wait();  // (had the free held the lock, the launches could only end now)
  EXPECT_TRUE(others_went_on) << "another thread's launches waited for the free";
  EXPECT_EQ(ops().prefetches.size(), prefetches_before) << "a leaving block is moved no more";
  EXPECT_EQ(charged_meanwhile, 3 * kBlock) << "its budget is kept until the driver has it back";
  EXPECT_EQ(ops().released, std::vector<CUdeviceptr>{blocks[0]});
  EXPECT_EQ(budgets_.host(), 2 * kBlock);
  for (const CUdeviceptr block : {blocks[1], blocks[2]}) EXPECT_EQ(always.free(block), CUDA_SUCCESS);
}

// While a free waits for the mover, its block is no victim, and the policy plans without its
// pages on the device, which the budget still counts.
TEST_F(PrefetchPlacementTest, ABlockBeingFreedIsNoVictim) {
  PrefetchPlacement always(budgets_, devices_, always_options());
  const auto [a, b, c] = three_blocks_in(always);
  ASSERT_FALSE(on_device_in(always, a));
  launch_on(always, 1, {b});  // c is now the coldest on the device
  uint64_t charged_meanwhile = 0;
  std::vector<Prefetch> moved_meanwhile;
  ops().while_waiting = [&] {
    const std::size_t before = ops().prefetches.size();
    launch_on(always, 5, {a});  // lru promotes a: b must make the room
    moved_meanwhile.assign(ops().prefetches.begin() + static_cast<std::ptrdiff_t>(before),
                           ops().prefetches.end());
    charged_meanwhile = budgets_.device();
  };
  ASSERT_EQ(always.free(c), CUDA_SUCCESS);
  EXPECT_TRUE(std::ranges::none_of(moved_meanwhile, [&](const Prefetch& p) { return p.base == c; }))
      << "a leaving block is moved no more";
  EXPECT_TRUE(on_device_in(always, a));
  EXPECT_FALSE(on_device_in(always, b)) << "the room came from the policy's own blocks";
  EXPECT_EQ(charged_meanwhile, 2 * kBlock) << "c's pages stayed charged until the driver had them";
  EXPECT_EQ(budgets_.device(), kBlock);
  EXPECT_EQ(ops().released, std::vector<CUdeviceptr>{c});
  for (const CUdeviceptr block : {a, b}) EXPECT_EQ(always.free(block), CUDA_SUCCESS);
}

// A free that fails, in its wait for the mover or in cuMemFree, leaves the block the program's:
// the policy has it again, with its pages on the device, and moves it as before.
TEST_F(PrefetchPlacementTest, ABlockWhoseFreeFailedMovesAsBefore) {
  for (bool FakePrefetchOps::*failure : {&FakePrefetchOps::fail_waits,
                                         &FakePrefetchOps::fail_releases}) {
    SCOPED_TRACE(failure == &FakePrefetchOps::fail_waits ? "the wait failed" : "cuMemFree failed");
    PrefetchPlacement always(budgets_, devices_, always_options());
    const auto [a, b, c] = three_blocks_in(always);
    ASSERT_FALSE(on_device_in(always, a));
    ops().*failure = true;
    EXPECT_NE(always.free(c), CUDA_SUCCESS);
    ops().*failure = false;
    EXPECT_EQ(budgets_.device(), 2 * kBlock);
    launch_on(always, 1, {b});  // c is now the coldest: lru evicts it for a
    launch_on(always, 2, {a});
    EXPECT_TRUE(on_device_in(always, a));
    EXPECT_FALSE(on_device_in(always, c)) << "the policy did not have the block back";
    EXPECT_TRUE(on_device_in(always, b));
    for (const CUdeviceptr block : {a, b, c}) EXPECT_EQ(always.free(block), CUDA_SUCCESS);
    EXPECT_EQ(budgets_.device(), 0u);
    EXPECT_EQ(budgets_.host(), 0u);
  }
}

TEST_F(PrefetchPlacementTest, RoomForAnotherAllocationIsMadeByEvictions) {
  const CUdeviceptr a = allocate();
  const CUdeviceptr b = allocate();
  launch(6, {b});
  const int waits = ops().waits;
  EXPECT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  EXPECT_FALSE(on_device(a));
  EXPECT_TRUE(on_device(b));
  EXPECT_EQ(budgets_.device(), kBlock);
  // The driver is asked for the room at once: the evicted pages must have left first.
  EXPECT_EQ(ops().waits, waits + 1);
  EXPECT_TRUE(placement_.make_device_room(0, kGranuleBytes));  // room already: nothing to wait
  EXPECT_EQ(ops().waits, waits + 1);
  EXPECT_FALSE(placement_.make_device_room(0, 4 * kBlock));  // more than the budget
}

// Note [The capture gate]: a capture another thread begins between the look and the driver's
// call would be broken by it, so the query of an arriving block's promotion, the evictions that
// make room and the wait for them are all made holding the gate.
TEST_F(PrefetchPlacementTest, TheMoversQueriesAndWaitsAreMadeHoldingCapturesOff) {
  const CUdeviceptr a = allocate();  // brought in at its allocation: arriving
  const CUdeviceptr b = allocate();
  ops().gate = &devices_.gate;
  launch(3, {a});  // asks whether a has arrived, and waits for it on the device
  launch(4, {b});
  ASSERT_TRUE(placement_.make_device_room(0, kGranuleBytes));  // evicts a and waits for it
  EXPECT_GE(ops().queries, 1);
  EXPECT_GE(ops().waits, 1);
  EXPECT_GE(ops().gate_held.size(), 4u);
  EXPECT_EQ(ops().gate_held, std::vector<bool>(ops().gate_held.size(), true));
}

// Evictions queued before the driver refused the next gave their room back to the budget, which
// may admit another thread's allocation into it: their pages must have left first, though the
// room asked for was not made.
TEST_F(PrefetchPlacementTest, RoomThatFellShortStillWaitsForTheEvictionsMade) {
  const CUdeviceptr a = allocate();
  const CUdeviceptr b = allocate();
  ops().evictions_before_refusal = 1;
  const int waits = ops().waits;
  EXPECT_FALSE(placement_.make_device_room(0, 2 * kBlock));
  EXPECT_NE(on_device(a), on_device(b)) << "one went before the driver refused the other";
  EXPECT_EQ(ops().waits, waits + 1);
}

// Room for another allocation is the budget's alone: the card's free memory (which counts
// promotions still in flight) is for the mover's own promotions.
TEST_F(PrefetchPlacementTest, RoomForAnotherAllocationIsNotHeldBackByTheCard) {
  const CUdeviceptr a = allocate();
  allocate();
  ops().free = 0;
  ops().done = false;
  EXPECT_TRUE(placement_.make_device_room(0, kGranuleBytes));
  EXPECT_FALSE(on_device(a));
}

// A destroyed stream's handle may be gone or reused: no later move waits on it.
TEST_F(PrefetchPlacementTest, AMoveWaitsForNoStreamTheProgramDestroyed) {
  const CUdeviceptr a = allocate();
  const CUdeviceptr b = allocate();
  launch(7, {a});
  launch(8, {a});
  launch(9, {b});
  placement_.stream_ended(7);
  ops().prefetches.clear();
  ASSERT_TRUE(placement_.make_device_room(0, kBlock));  // evicts a, the coldest
  ASSERT_FALSE(ops().prefetches.empty());
  EXPECT_EQ(ops().prefetches.front(), (Prefetch{a, kBlock, false, {8}}));
  allocate();  // takes the room
  placement_.all_streams_ended();
  // a, used again and again, is brought back, evicting b: after no stream at all.
  for (int i = 0; i < 10 && !on_device(a); ++i) launch(10, {a});
  ASSERT_TRUE(on_device(a));
  const auto evicting_b = std::find_if(ops().prefetches.begin(), ops().prefetches.end(),
                                       [&](const Prefetch& p) { return p.base == b; });
  ASSERT_NE(evicting_b, ops().prefetches.end());
  EXPECT_FALSE(evicting_b->to_device);
  EXPECT_TRUE(evicting_b->after.empty());
}

TEST_F(PrefetchPlacementTest, TheTraceIsToldOfEachBlockBeforeItsMovesAndUses) {
  RecordedEvents events;
  placement_.set_events(&events);
  const CUdeviceptr a = allocate();
  const CUdeviceptr b = allocate();
  launch(5, {a});
  const CUdeviceptr c = allocate();  // on the host: no room
  for (int i = 0; i < 10 && !on_device(c); ++i) launch(5, {c});  // until it evicts b
  ASSERT_TRUE(on_device(c));
  const auto n = [](CUdeviceptr base) { return std::to_string(base); };
  const std::string block = std::to_string(kBlock);
  std::vector<std::string> expected = {
      "alloc " + n(a),   "evict " + n(a) + " " + block, "promote " + n(a) + " " + block,
      "alloc " + n(b),   "evict " + n(b) + " " + block, "promote " + n(b) + " " + block,
      "use 5 1",         "alloc " + n(c),               "evict " + n(c) + " " + block};
  // c's launches, the last of which brought it in after b left (a launch is told before its
  // moves).
  expected.insert(expected.end(), events.lines.size() - expected.size() - 2, "use 5 1");
  expected.insert(expected.end(),
                  {"evict " + n(b) + " " + block, "promote " + n(c) + " " + block});
  EXPECT_EQ(events.lines, expected);
}

TEST_F(PrefetchPlacementTest, ADeviceWithoutTheMoverAndAnUnknownPolicyAreRefused) {
  CUdeviceptr base = 0;
  EXPECT_EQ(placement_.allocate(1, kBlock, &base), CUDA_ERROR_NOT_SUPPORTED);
  PrefetchPlacement unknown(budgets_, devices_, {.policy = "belady-ish"});
  EXPECT_NE(unknown.error().find("lru"), std::string::npos) << unknown.error();
  EXPECT_EQ(unknown.allocate(0, kBlock, &base), CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
}  // namespace vramspill::placement
