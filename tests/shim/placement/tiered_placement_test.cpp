// placement/tiered_placement over the granule arena on fake VMM calls, fake budgets and the real
// lru policy: blocks take the device while the budget allows, cold blocks are evicted for new
// ones, a launch promotes the blocks it touches, every byte stays where it was, and the budgets
// are never exceeded (Note [Tiered budgets]).
#include "placement/tiered_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/use_tracker.h"
#include "fake_tiered_budgets.h"
#include "one_arena.h"
#include "placement/submission_order.h"
#include "telemetry/log.h"
#include "../tiers/fake_granule_ops.h"

namespace vramspill::placement {
namespace {

using tiers::GranuleKind;
using tiers::kGranuleBytes;

class TieredPlacementTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
    std::string problem;
    EXPECT_TRUE(arena_.check_invariants(&problem)) << problem;
    // What the budgets hold is what the arena holds (Note [Tiered budgets]).
    const tiers::ArenaStats held = arena_.stats();
    EXPECT_EQ(budgets_.device(),
              (held.device_granules + held.pooled_device_granules) * kGranuleBytes);
    EXPECT_EQ(budgets_.host(),
              (held.host_granules + held.staged_host_granules + held.pooled_host_granules) *
                  kGranuleBytes);
  }

  CUdeviceptr allocate(uint64_t granules, std::optional<RuleAction> rule = std::nullopt) {
    return allocate_in(placement_, granules, rule);
  }
  // A block of `placement`, each granule written with what expect_bytes() reads back.
  CUdeviceptr allocate_in(TieredPlacement& placement, uint64_t granules,
                          std::optional<RuleAction> rule = std::nullopt) {
    CUdeviceptr base = 0;
    EXPECT_EQ(placement.allocate(0, granules * kGranuleBytes, &base, rule).result, CUDA_SUCCESS);
    for (uint64_t i = 0; i < granules; ++i) ops_.write(base + i * kGranuleBytes, base + i);
    return base;
  }
  static TieredOptions learned_options() {
    return {.policy = "learned", .invariant_mode = policies::InvariantMode::kAbort};
  }
  void launch(std::vector<policies::BlockId> blocks) {
    placement_.before_launch(0, ++sequence_, 1, blocks);
  }
  uint64_t device_granules(CUdeviceptr base) {
    return arena_.block_containing(base)->device_granules;
  }
  // What `body` logs. The logger writes to the copy of standard error it took when it was made,
  // so it is made again on the captured one, and again once the capture is over.
  template <typename Body>
  static std::string logged_by(Body&& body) {
    ::testing::internal::CaptureStderr();
    logging::configure(default_config().log);
    body();
    logging::flush();
    std::string log = ::testing::internal::GetCapturedStderr();
    logging::configure(default_config().log);
    return log;
  }
  void expect_bytes(CUdeviceptr base, uint64_t granules) {
    for (uint64_t i = 0; i < granules; ++i)
      EXPECT_EQ(ops_.read(base + i * kGranuleBytes), base + i) << "granule " << i;
  }

  tiers::FakeGranuleOps ops_;
  tiers::GranuleArena arena_{ops_, tiers::ArenaOptions{}};
  FakeBudgets budgets_{8 * kGranuleBytes, 64 * kGranuleBytes};
  OneArena arenas_{arena_};
  core::RemapWindow window_;
  TieredPlacement placement_{budgets_,
                             arenas_,
                             window_,
                             {.policy = "lru", .invariant_mode = policies::InvariantMode::kAbort}};
  uint64_t sequence_ = 0;
};

TEST_F(TieredPlacementTest, BlocksTakeTheDeviceWhileTheBudgetAllows) {
  const CUdeviceptr a = allocate(5);
  EXPECT_EQ(device_granules(a), 5u);
  EXPECT_EQ(budgets_.device(), 5 * kGranuleBytes);
  EXPECT_EQ(placement_.stats().windows, 0u) << "nothing to evict, nothing moved";
}

TEST_F(TieredPlacementTest, ANewBlockEvictsTheLeastRecentlyUsedOne) {
  const CUdeviceptr old_block = allocate(4);
  const CUdeviceptr hot = allocate(4);
  launch({old_block});
  launch({hot});  // old_block is now the least recently used
  const CUdeviceptr fresh = allocate(4);
  EXPECT_EQ(device_granules(fresh), 4u);
  EXPECT_EQ(device_granules(hot), 4u);
  EXPECT_EQ(device_granules(old_block), 0u);
  expect_bytes(old_block, 4);
  expect_bytes(hot, 4);
  EXPECT_EQ(placement_.stats().evicted_granules, 4u);
  EXPECT_LE(budgets_.device(), 8 * kGranuleBytes);
}

TEST_F(TieredPlacementTest, ALaunchPromotesTheBlockItTouches) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  const CUdeviceptr c = allocate(4);  // evicts a
  ASSERT_EQ(device_granules(a), 0u);
  launch({a});  // a comes back; b, the least recent, goes
  EXPECT_EQ(device_granules(a), 4u);
  EXPECT_EQ(device_granules(b), 0u);
  EXPECT_EQ(device_granules(c), 4u);
  expect_bytes(a, 4);
  expect_bytes(b, 4);
  EXPECT_EQ(placement_.stats().promoted_granules, 4u);
}

// The eviction that makes room and the promotion it makes room for share one remap window.
TEST_F(TieredPlacementTest, ALaunchEvictsAndPromotesInOneWindow) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  allocate(4);  // evicts a: one window
  ASSERT_EQ(placement_.stats().windows, 1u);
  const int follows_before = ops_.calls(tiers::FakeGranuleOps::kFollow);
  launch({a});  // evicts b and brings a back
  EXPECT_EQ(device_granules(a), 4u);
  EXPECT_EQ(placement_.stats().evicted_granules, 8u);
  EXPECT_EQ(placement_.stats().windows, 2u);
  // Note [Evictions ahead of promotions]: a's copies follow b's, which gave up its granules, and
  // the window opens again only once both are over.
  EXPECT_GT(ops_.calls(tiers::FakeGranuleOps::kFollow), follows_before);
  EXPECT_EQ(ops_.copies_in_flight(), 0u);
  expect_bytes(a, 4);
  expect_bytes(b, 4);
}

// Note [Evictions ahead of promotions]: in the safe window, evictions copied ahead of promotions
// that then do not come (here the host limit takes only the first victim, so the promotion does
// not fit) are over before the window opens.
TEST_F(TieredPlacementTest, EvictionsAheadOfPromotionsThatDoNotComeAreOverBeforeTheWindowOpens) {
  FakeBudgets tight{8 * kGranuleBytes, 6 * kGranuleBytes};
  TieredPlacement placement{
      tight, arenas_, window_, {.policy = "lru", .invariant_mode = policies::InvariantMode::kAbort}};
  const CUdeviceptr a = allocate_in(placement, 4);
  const CUdeviceptr x = allocate_in(placement, 2);
  const CUdeviceptr y = allocate_in(placement, 2);
  const CUdeviceptr z = allocate_in(placement, 4);  // evicts a: the host holds 4 of 6
  ASSERT_EQ(arena_.block_containing(a)->device_granules, 0u);
  placement.before_launch(0, ++sequence_, 1, std::vector<policies::BlockId>{a});
  EXPECT_EQ(device_granules(x), 0u) << "the first victim went";
  EXPECT_EQ(device_granules(y), 2u) << "the host limit kept the second";
  EXPECT_EQ(arena_.block_containing(a)->device_granules, 0u) << "so a did not fit";
  EXPECT_EQ(ops_.copies_in_flight(), 0u) << "x's copy is over before the window opened";
  for (const CUdeviceptr base : {a, x, y, z}) {
    expect_bytes(base, arena_.block_containing(base)->granules);
    EXPECT_EQ(placement.free(0, base), CUDA_SUCCESS);
  }
}

// The victims are chosen before anything moves: none is evicted for a promotion that would not
// fit even with all of them gone.
TEST_F(TieredPlacementTest, NoBlockIsEvictedForAPromotionThatCannotFit) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(2);
  const CUdeviceptr c = allocate(6);  // evicts a
  ASSERT_EQ(device_granules(a), 0u);
  launch({a, c});  // a needs 4 granules; only b's 2 could go
  EXPECT_EQ(device_granules(a), 0u);
  EXPECT_EQ(device_granules(b), 2u);
  EXPECT_EQ(placement_.stats().evicted_granules, 4u);
  EXPECT_EQ(placement_.stats().promotions_refused, 1u);
  expect_bytes(a, 4);
  expect_bytes(c, 6);
}

TEST_F(TieredPlacementTest, ABlockTheLaunchNeedsIsNeverEvictedForAnother) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  const CUdeviceptr c = allocate(4);  // evicts a
  launch({a, b});                     // a needs room: c goes, b stays (the launch keeps it)
  EXPECT_EQ(device_granules(a), 4u);
  EXPECT_EQ(device_granules(b), 4u);
  EXPECT_EQ(device_granules(c), 0u);
}

TEST_F(TieredPlacementTest, ABlockLargerThanTheBudgetIsSplitAndTouchedInPlace) {
  const CUdeviceptr big = allocate(12);
  EXPECT_EQ(device_granules(big), 8u);
  launch({big});
  EXPECT_EQ(device_granules(big), 8u) << "it cannot fit whole: it stays as it is";
  EXPECT_GE(placement_.stats().promotions_refused, 1u);
  expect_bytes(big, 12);
}

TEST_F(TieredPlacementTest, TheHostLimitBoundsWhatDoesNotFit) {
  FakeBudgets tight{4 * kGranuleBytes, 2 * kGranuleBytes};
  TieredPlacement placement{tight, arenas_, window_, {}};
  CUdeviceptr base = 0;
  const TieredPlacement::Allocated refused = placement.allocate(0, 7 * kGranuleBytes, &base);
  EXPECT_EQ(refused.result, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(refused.over_budgets);
  EXPECT_EQ(tight.device(), 0u);
  EXPECT_EQ(tight.host(), 0u);
  EXPECT_EQ(placement.allocate(0, 6 * kGranuleBytes, &base).result, CUDA_SUCCESS);
  EXPECT_EQ(tight.device(), 4 * kGranuleBytes);
  EXPECT_EQ(tight.host(), 2 * kGranuleBytes);
  EXPECT_EQ(placement.free(0, base), CUDA_SUCCESS);
  EXPECT_EQ(tight.device(), 0u);
  EXPECT_EQ(tight.host(), 0u);
}

TEST_F(TieredPlacementTest, FreesGiveTheBudgetsBack) {
  const CUdeviceptr a = allocate(6);
  const CUdeviceptr b = allocate(6);  // evicts a
  EXPECT_EQ(placement_.free(0, a), CUDA_SUCCESS);
  EXPECT_EQ(placement_.free(0, b), CUDA_SUCCESS);
  EXPECT_EQ(budgets_.device(), 0u);
  EXPECT_EQ(budgets_.host(), 0u);
  EXPECT_EQ(placement_.free(0, b), CUDA_ERROR_INVALID_VALUE);
}

// Note [Held past the charge]: in a user's job, granules the arena holds uncharged are taken
// from the budget when it settles, so that the budget is never given back bytes it never took.
TEST_F(TieredPlacementTest, WhatTheArenaHoldsUnchargedIsTakenWhenItSettles) {
  TieredPlacement placement{budgets_, arenas_, window_, {.policy = "lru"}};  // counts and drops
  const CUdeviceptr charged = allocate_in(placement, 2);
  CUdeviceptr uncharged = 0;
  ASSERT_EQ(arena_.allocate(3 * kGranuleBytes, 3, &uncharged), CUDA_SUCCESS);  // behind its back
  const std::string log =
      logged_by([&] { ASSERT_EQ(placement.free(0, charged), CUDA_SUCCESS); });
  EXPECT_NE(log.find("held 2097152 device and 0 host bytes its budgets had not been charged for"),
            std::string::npos)
      << log;
  EXPECT_EQ(budgets_.device(), 3 * kGranuleBytes);
  ASSERT_EQ(placement.free(0, uncharged), CUDA_SUCCESS);
  EXPECT_EQ(budgets_.device(), 0u);
}

// [[tiered.rule]] actions (Note [Rules before the policy]).
TEST_F(TieredPlacementTest, APinnedBlockIsNeverEvicted) {
  const CUdeviceptr pinned = allocate(4, RuleAction::kPin);
  const CUdeviceptr b = allocate(4);
  launch({b});  // the pinned block is the least recently used: lru's victim but for the rule
  const CUdeviceptr c = allocate(4);
  EXPECT_EQ(device_granules(pinned), 4u);
  EXPECT_EQ(device_granules(b), 0u);
  EXPECT_EQ(device_granules(c), 4u);
  launch({b});  // b comes back, and c, not the pinned block, makes room
  EXPECT_EQ(device_granules(pinned), 4u);
  EXPECT_EQ(device_granules(b), 4u);
  EXPECT_EQ(device_granules(c), 0u);
  expect_bytes(c, 4);
}

TEST_F(TieredPlacementTest, APreferHostBlockIsPlacedOnTheHostAndNeverPromoted) {
  const CUdeviceptr on_host = allocate(2, RuleAction::kPreferHost);
  EXPECT_EQ(device_granules(on_host), 0u) << "placed on the host although the device had room";
  EXPECT_EQ(budgets_.device(), 0u);
  launch({on_host});
  EXPECT_EQ(device_granules(on_host), 0u);
  EXPECT_EQ(placement_.stats().promotions_refused, 1u);
  EXPECT_EQ(placement_.stats().windows, 0u);
  expect_bytes(on_host, 2);
}

TEST_F(TieredPlacementTest, EvictFirstBlocksGiveRoomBeforeThePolicyChooses) {
  const CUdeviceptr first = allocate(4, RuleAction::kEvictFirst);
  const CUdeviceptr b = allocate(4);
  launch({b});
  launch({first});  // lru would now evict b
  const CUdeviceptr c = allocate(4);
  EXPECT_EQ(device_granules(first), 0u);
  EXPECT_EQ(device_granules(b), 4u);
  EXPECT_EQ(device_granules(c), 4u);
  launch({first});  // promoted as the policy agrees: lru's victim is then b
  EXPECT_EQ(device_granules(first), 4u);
  EXPECT_EQ(device_granules(b), 0u);
  expect_bytes(first, 4);
  expect_bytes(b, 4);
}

TEST_F(TieredPlacementTest, AnUnknownPolicyIsAnErrorNamingTheValidOnes) {
  const TieredPlacement placement{budgets_, arenas_, window_, {.policy = "belady"}};
  EXPECT_NE(placement.error().find("lru"), std::string::npos) << placement.error();
  CUdeviceptr base = 0;
  EXPECT_EQ(const_cast<TieredPlacement&>(placement).allocate(0, kGranuleBytes, &base).result,
            CUDA_ERROR_NOT_SUPPORTED);
}

// A training-like loop over more blocks than the budget holds, with random launches: every byte
// stays put, the budgets hold, and the policy's checks (abort mode) never fire.
TEST_F(TieredPlacementTest, ALoopOverTwiceTheBudgetKeepsEveryByte) {
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(allocate(2));
  for (int step = 0; step < 50; ++step) {
    for (std::size_t i = 0; i < blocks.size(); ++i) launch({blocks[i], blocks[(i + 3) % 8]});
    for (std::size_t i = blocks.size(); i-- > 0;) launch({blocks[i]});
    EXPECT_LE(budgets_.device(), 8 * kGranuleBytes);
  }
  for (const CUdeviceptr block : blocks) expect_bytes(block, 2);
  EXPECT_GT(placement_.stats().promoted_granules, 0u);
  EXPECT_EQ(placement_.stats().promoted_ahead, 0u) << "lru knows nothing of what comes next";
}

}  // namespace
// Note [No moves during a capture]: a synchronisation would invalidate the program's capture.
TEST_F(TieredPlacementTest, NothingMovesWhileACaptureIsInProgress) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  arenas_.synchronize = false;
  const CUdeviceptr c = allocate(4);  // no room is made: c goes to the host
  EXPECT_EQ(device_granules(a), 4u);
  EXPECT_EQ(device_granules(c), 0u);
  launch({c});  // touched in place
  EXPECT_EQ(device_granules(c), 0u);
  EXPECT_EQ(placement_.stats().windows, 0u);
  EXPECT_EQ(placement_.stats().promotions_refused, 1u);
  arenas_.synchronize = true;
  launch({c});  // the capture is over: c comes in, the least recent goes
  EXPECT_EQ(device_granules(c), 4u);
  EXPECT_EQ(device_granules(a), 0u);
  expect_bytes(a, 4);
  expect_bytes(b, 4);
  expect_bytes(c, 4);
}

TEST_F(TieredPlacementTest, ASubmissionReachesTheArenaHoldingItsBlocks) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  allocate(4);  // evicts a
  const std::vector<policies::BlockId> touched = {a, 0x1000 /* no arena's */};
  placement_.before_submission(++sequence_, 1, touched);
  EXPECT_EQ(device_granules(a), 4u);
  EXPECT_EQ(device_granules(b), 0u);
  EXPECT_GT(placement_.stats().window_nanoseconds, 0u);
}

// Note [The policy's capacity]: room another allocation took is not the policy's to count. Told
// the budget it had when the device was first seen, lru would agree to bring in a block larger
// than what tiered blocks may now hold, and evict b for a promotion that cannot happen.
TEST_F(TieredPlacementTest, ThePolicyDecidesWithTheRoomLeftNow) {
  const CUdeviceptr a = allocate(6);
  const CUdeviceptr b = allocate(2);
  ASSERT_TRUE(placement_.make_device_room(0, 4 * kGranuleBytes));  // evicts a
  ASSERT_TRUE(budgets_.take_device(0, 4 * kGranuleBytes));         // another allocation's
  ASSERT_EQ(device_granules(a), 0u);
  const uint64_t evicted = placement_.stats().evicted_granules;
  launch({a});  // 6 granules, where tiered blocks may hold 4 now: reached in place
  EXPECT_EQ(device_granules(a), 0u);
  EXPECT_EQ(device_granules(b), 2u);
  EXPECT_EQ(placement_.stats().evicted_granules, evicted);
  EXPECT_EQ(placement_.stats().promotions_refused, 1u);
  budgets_.give_device(0, 4 * kGranuleBytes);
  expect_bytes(a, 6);
  expect_bytes(b, 2);
}

// Note [Tiered budgets]: the budget is the device's. An allocation tiered mode does not take gets
// room from the arena: pooled device granules first, then evictions.
TEST_F(TieredPlacementTest, OtherAllocationsGetRoomFromTheArena) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  ASSERT_EQ(placement_.free(0, b), CUDA_SUCCESS);
  const CUdeviceptr c = allocate(4);
  ASSERT_EQ(budgets_.device(), 8 * kGranuleBytes);
  EXPECT_TRUE(placement_.make_device_room(0, 3 * kGranuleBytes));
  EXPECT_GE(budgets_.device_room(0), 3 * kGranuleBytes);
  EXPECT_EQ(device_granules(a) + device_granules(c), 4u) << "one block was evicted";
  expect_bytes(a, 4);
  expect_bytes(c, 4);
  EXPECT_TRUE(placement_.make_device_room(0, 8 * kGranuleBytes));
  EXPECT_EQ(budgets_.device(), 0u);
  EXPECT_FALSE(placement_.make_device_room(0, 9 * kGranuleBytes)) << "more than the budget";
}

// Room the blocks cannot give in full is not made in part: the request is spilled or split all
// the same, and the evicted blocks would come back at their next launch.
TEST_F(TieredPlacementTest, RoomTheBlocksCannotGiveInFullIsNotMadeInPart) {
  const CUdeviceptr a = allocate(4);
  const CUdeviceptr b = allocate(4);
  EXPECT_FALSE(placement_.make_device_room(0, 9 * kGranuleBytes));
  const CUdeviceptr big = allocate(12);
  EXPECT_EQ(device_granules(a) + device_granules(b), 8u) << "nothing was evicted";
  EXPECT_EQ(device_granules(big), 0u);
  EXPECT_EQ(placement_.stats().evicted_granules, 0u);
  expect_bytes(big, 12);
}

// Note [Learning the period] in policies/learned.h: the log says when the policy locks on the
// job's period, and when it loses it.
TEST_F(TieredPlacementTest, TheLogSaysWhatTheLearnedPolicyLearned) {
  TieredPlacement learned{budgets_,
                          arenas_,
                          window_,
                          {.policy = "learned", .invariant_mode = policies::InvariantMode::kAbort}};
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 3; ++i) {
    CUdeviceptr base = 0;
    ASSERT_EQ(learned.allocate(0, 4 * kGranuleBytes, &base).result, CUDA_SUCCESS);
    blocks.push_back(base);
  }
  const std::string log = logged_by([&] {
    // It locks once the period has repeated over a whole window of 16 launches (Note [Finding
    // the period] in policies/period_finder.h), and two launches out of step end it.
    for (int round = 0; round < 7; ++round) {
      for (const CUdeviceptr block : blocks)
        learned.before_launch(0, ++sequence_, 1, std::vector<policies::BlockId>{block});
    }
    for (int i = 0; i < 2; ++i)
      learned.before_launch(0, ++sequence_, 1,
                            std::vector<policies::BlockId>{blocks[1], blocks[2]});
  });
  EXPECT_NE(log.find("tiered policy learned on device 0: locked on a period of 3 launches"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("tiered policy learned on device 0: the launches stopped repeating the "
                     "period (1 times so far)"),
            std::string::npos)
      << log;
  for (const CUdeviceptr block : blocks) EXPECT_EQ(learned.free(0, block), CUDA_SUCCESS);
}

// Note [Promoting ahead] in policies/eviction_policy.h: once learned has locked on a loop, a
// launch that stops to bring its block in also brings in what the next launches need, into the
// room a block the loop never uses held.
TEST_F(TieredPlacementTest, LearnedBringsInAheadWhatTheNextLaunchesNeed) {
  TieredPlacement learned{budgets_, arenas_, window_, learned_options()};
  std::vector<CUdeviceptr> loop;
  for (int i = 0; i < 5; ++i) loop.push_back(allocate_in(learned, 2));  // 10 granules on 8
  const auto turn = [&] {
    for (const CUdeviceptr block : loop)
      learned.before_launch(0, ++sequence_, 1, std::vector<policies::BlockId>{block});
  };
  for (int round = 0; round < 5; ++round) turn();  // locked after a window of 16 launches
  ASSERT_EQ(learned.stats().promoted_ahead, 0u) << "no room nothing needed holds, yet";
  const CUdeviceptr cold = allocate_in(learned, 4);  // never used: two loop blocks go for it
  turn();
  EXPECT_GE(learned.stats().promoted_ahead, 1u);
  EXPECT_EQ(device_granules(cold), 0u) << "its room went to the loop";
  for (const CUdeviceptr block : loop) expect_bytes(block, 2);
  expect_bytes(cold, 4);
  for (const CUdeviceptr block : loop) EXPECT_EQ(learned.free(0, block), CUDA_SUCCESS);
  EXPECT_EQ(learned.free(0, cold), CUDA_SUCCESS);
}

// Note [Evicting part of a block] in policies/eviction_policy.h: a block of one granule needs
// one granule of room, and learned's victim gives up that one, not all it holds.
TEST_F(TieredPlacementTest, LearnedsVictimGivesUpOnlyWhatTheNeedLeaves) {
  TieredPlacement learned{budgets_, arenas_, window_, learned_options()};
  const std::vector<CUdeviceptr> loop{allocate_in(learned, 4), allocate_in(learned, 2),
                                      allocate_in(learned, 2)};  // the whole budget of 8
  for (int round = 0; round < 8; ++round) {
    for (const CUdeviceptr block : loop)
      learned.before_launch(0, ++sequence_, 1, std::vector<policies::BlockId>{block});
  }
  const CUdeviceptr small = allocate_in(learned, 1);
  EXPECT_EQ(device_granules(small), 1u);
  uint64_t on_device = 0;
  for (const CUdeviceptr block : loop) on_device += device_granules(block);
  EXPECT_EQ(on_device, 7u) << "a whole block went to the host for a need of one granule";
  EXPECT_EQ(budgets_.host(), kGranuleBytes);
  for (const CUdeviceptr block : loop) expect_bytes(block, arena_.block_containing(block)->granules);
  expect_bytes(small, 1);
  for (const CUdeviceptr block : loop) EXPECT_EQ(learned.free(0, block), CUDA_SUCCESS);
  EXPECT_EQ(learned.free(0, small), CUDA_SUCCESS);
}

// Note [Chunks] in tiers/granule_chunks.h: an eviction of part of a chunked block moves the whole
// chunk, and the host budget is charged for all it moves, not for the part the need asked.
TEST(TieredPlacementChunks, AnEvictionOfPartOfAChunkChargesTheHostForTheChunk) {
  tiers::FakeGranuleOps ops;
  tiers::GranuleArena arena{ops, {.chunks = {.chunk_granules = 4, .chunked_block_granules = 4}}};
  FakeBudgets budgets{8 * kGranuleBytes, 64 * kGranuleBytes};
  OneArena arenas{arena};
  core::RemapWindow window;
  TieredPlacement learned{budgets, arenas, window,
                          {.policy = "learned", .invariant_mode = policies::InvariantMode::kAbort}};
  uint64_t sequence = 0;
  std::vector<CUdeviceptr> loop;  // two blocks of one chunk each: the whole budget of 8
  for (int i = 0; i < 2; ++i) {
    CUdeviceptr base = 0;
    ASSERT_EQ(learned.allocate(0, 4 * kGranuleBytes, &base).result, CUDA_SUCCESS);
    loop.push_back(base);
  }
  for (int round = 0; round < 8; ++round) {
    for (const CUdeviceptr block : loop)
      learned.before_launch(0, ++sequence, 1, std::vector<policies::BlockId>{block});
  }
  CUdeviceptr small = 0;
  ASSERT_EQ(learned.allocate(0, kGranuleBytes, &small).result, CUDA_SUCCESS);
  EXPECT_EQ(arena.block_containing(small)->device_granules, 1u);
  const tiers::ArenaStats held = arena.stats();
  EXPECT_EQ(held.host_granules, 4u) << "a chunk went to the host for a need of one granule";
  EXPECT_EQ(budgets.host(),
            (held.host_granules + held.staged_host_granules + held.pooled_host_granules) *
                kGranuleBytes);
  EXPECT_EQ(budgets.device(), (held.device_granules + held.pooled_device_granules) * kGranuleBytes);
  for (const CUdeviceptr block : loop) EXPECT_EQ(learned.free(0, block), CUDA_SUCCESS);
  EXPECT_EQ(learned.free(0, small), CUDA_SUCCESS);
  EXPECT_TRUE(ops.misuse().empty());
}

// Note [The tracked window]: the same arena and budgets, the placement reading a use tracker
// that tracks each block as the hooks do (its base is its id).
class TrackedWindowTest : public TieredPlacementTest {
 protected:
  static constexpr uint64_t kStreamA = 0xa000;
  static constexpr uint64_t kStreamB = 0xb000;

  // A block of `placement` (tracked_ when null), tracked and tagged.
  CUdeviceptr allocate_tracked(uint64_t granules, TieredPlacement* placement = nullptr) {
    CUdeviceptr base = 0;
    TieredPlacement& into = placement != nullptr ? *placement : tracked_;
    EXPECT_EQ(into.allocate(0, granules * kGranuleBytes, &base).result, CUDA_SUCCESS);
    EXPECT_EQ(uses_.track(base, granules * kGranuleBytes, base), core::TrackResult::kTracked);
    for (uint64_t i = 0; i < granules; ++i) ops_.write(base + i * kGranuleBytes, base + i);
    return base;
  }
  // A kernel on `stream` whose one argument points into `block`, as the hooks see it.
  void launch_on(uint64_t stream, CUdeviceptr block, TieredPlacement* placement = nullptr) {
    core::SubmissionUse use;
    const uint64_t words[] = {block + 64};
    uses_.record_words(stream, words, use);
    TieredPlacement& into = placement != nullptr ? *placement : tracked_;
    into.before_submission(use.sequence, static_cast<uint32_t>(stream),
                           std::span(use.blocks.data(), use.count));
    into.order_after_copies(use, false);
    end_submission(use);
  }
  // What the hook does inside the window around the driver call (no event is recorded here).
  void end_submission(const core::SubmissionUse& use) {
    if (const auto due = uses_.stream_slots().end_call(uses_.mark_streams(use)))
      uses_.stream_slots().recorded(*due, 0, 0);
  }
  void free_all(std::initializer_list<CUdeviceptr> blocks) {
    for (const CUdeviceptr block : blocks) {
      uses_.untrack(block);
      EXPECT_EQ(tracked_.free(0, block), CUDA_SUCCESS);
    }
  }

  static TieredOptions tracked_options(std::string policy) {
    return {.policy = std::move(policy),
            .window = WindowMode::kTracked,
            .invariant_mode = policies::InvariantMode::kAbort};
  }

  core::UseTracker uses_;
  TieredPlacement tracked_{budgets_, arenas_, window_, tracked_options("lru"), &uses_};
};

TEST_F(TrackedWindowTest, AnEvictionWaitsOnlyForTheStreamsThatUsedTheVictim) {
  const CUdeviceptr cold = allocate_tracked(4);
  const CUdeviceptr hot = allocate_tracked(4);
  launch_on(kStreamA, cold);
  launch_on(kStreamB, hot);  // cold is now the least recently used
  const CUdeviceptr fresh = allocate_tracked(4);
  EXPECT_EQ(device_granules(cold), 0u);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kSynchronize), 0);
  EXPECT_EQ(ops_.streams_waited_for(), std::vector<uint64_t>{kStreamA});
  EXPECT_EQ(tracked_.stats().stream_waits, 1u);
  // Promoting cold for a launch on B (after a victim made room) waits for no stream: A's work on
  // it was waited for at its eviction, and the launch that wants it is queued after the move.
  launch_on(kStreamB, cold);
  EXPECT_EQ(device_granules(cold), 4u);
  EXPECT_TRUE(ops_.streams_waited_for().empty());
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kSynchronize), 0);
  free_all({cold, hot, fresh});
}

// Note [Moves copied on the stream] in tiers/granule_arena.h: the promotion a launch asks for,
// and the eviction that makes room for it, are copied on the arena's stream; the launch's stream
// waits for the copy, and the host for neither.
TEST_F(TrackedWindowTest, ALaunchsMovesAreCopiedOnTheStreamItWaitsOn) {
  const CUdeviceptr cold = allocate_tracked(4);
  const CUdeviceptr hot = allocate_tracked(4);
  launch_on(kStreamA, cold);
  launch_on(kStreamB, hot);
  const CUdeviceptr fresh = allocate_tracked(4);  // cold makes room for it
  const int host_waits = ops_.calls(tiers::FakeGranuleOps::kWait);
  launch_on(kStreamB, cold);
  EXPECT_EQ(device_granules(cold), 4u);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kWait), host_waits);
  ASSERT_FALSE(ops_.stream_orders().empty());
  EXPECT_EQ(ops_.stream_orders().back().stream, kStreamB);
  EXPECT_FALSE(ops_.stream_orders().back().capturing);
  EXPECT_EQ(tracked_.stats().streamed_granules, 12u) << "cold out for fresh, then one out, cold in";
  for (const CUdeviceptr block : {cold, hot, fresh}) expect_bytes(block, 4);
  free_all({cold, hot, fresh});
}

// Note [Evictions ahead of promotions]: in the tracked window too, only a batch of the same
// window follows the marks of a batch ahead. Here the host limit lets the evictions ahead make
// too little room, so no promotion follows them; the next window's promotion begins an epoch of
// its own rather than following stale marks.
TEST_F(TrackedWindowTest, TheNextWindowFollowsNoMarksOfEvictionsAheadBeforeIt) {
  FakeBudgets tight{8 * kGranuleBytes, 6 * kGranuleBytes};
  TieredPlacement placement{tight, arenas_, window_, tracked_options("lru"), &uses_};
  const CUdeviceptr a = allocate_tracked(4, &placement);
  const CUdeviceptr x = allocate_tracked(2, &placement);
  const CUdeviceptr y = allocate_tracked(2, &placement);
  const CUdeviceptr z = allocate_tracked(4, &placement);  // evicts a: the host holds 4 of 6
  launch_on(kStreamA, a, &placement);  // x goes ahead; the host limit keeps y; a does not fit
  ASSERT_EQ(device_granules(x), 0u);
  ASSERT_EQ(device_granules(y), 2u);
  ASSERT_EQ(device_granules(a), 0u);
  const int epochs = ops_.calls(tiers::FakeGranuleOps::kBeginCopies);
  const int follows = ops_.calls(tiers::FakeGranuleOps::kFollow);
  launch_on(kStreamA, x, &placement);  // a window of its own: x comes back into free room
  EXPECT_EQ(device_granules(x), 2u);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kFollow), follows)
      << "a batch followed the marks of another window's batch ahead";
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kBeginCopies), epochs + 1);
  for (const CUdeviceptr base : {a, x, y, z}) {
    expect_bytes(base, arena_.block_containing(base)->granules);
    uses_.untrack(base);
    EXPECT_EQ(placement.free(0, base), CUDA_SUCCESS);
  }
}

TEST_F(TrackedWindowTest, AGraphLaunchMakesTheNextMoveWaitForItsStreamToo) {
  const CUdeviceptr cold = allocate_tracked(4);
  const CUdeviceptr hot = allocate_tracked(4);
  launch_on(kStreamA, cold);
  launch_on(kStreamA, hot);
  core::SubmissionUse graph;
  uses_.record_everything(kStreamB, graph);
  end_submission(graph);
  const CUdeviceptr fresh = allocate_tracked(4);
  std::vector<uint64_t> waited = ops_.streams_waited_for();
  std::ranges::sort(waited);
  EXPECT_EQ(waited, (std::vector<uint64_t>{kStreamA, kStreamB}));
  free_all({cold, hot, fresh});
}

// A kernel that reaches a block the tracker does not know names no block (and is not a graph):
// a move of it waits for the whole device, and no submission could be made to wait for its copy,
// so it is copied in the window (Note [Moves copied on the stream]).
TEST_F(TrackedWindowTest, ABlockTheTrackerDoesNotKnowWaitsForTheWholeDevice) {
  CUdeviceptr untracked = 0;
  ASSERT_EQ(tracked_.allocate(0, 4 * kGranuleBytes, &untracked).result, CUDA_SUCCESS);
  const CUdeviceptr hot = allocate_tracked(4);
  launch_on(kStreamA, hot);
  const CUdeviceptr fresh = allocate_tracked(4);  // evicts the untracked block, never used
  EXPECT_EQ(device_granules(untracked), 0u);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kSynchronize), 1);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kWaitForStreams), 0);
  EXPECT_EQ(tracked_.stats().stream_waits, 0u);
  EXPECT_EQ(tracked_.stats().streamed_granules, 0u);
  EXPECT_EQ(tracked_.free(0, untracked), CUDA_SUCCESS);
  free_all({hot, fresh});
}

TEST_F(TrackedWindowTest, AFailedStreamWaitFallsBackToTheWholeDevice) {
  const CUdeviceptr cold = allocate_tracked(4);
  const CUdeviceptr hot = allocate_tracked(4);
  launch_on(kStreamA, cold);
  launch_on(kStreamB, hot);
  ops_.fail(tiers::FakeGranuleOps::kWaitForStreams, 1, CUDA_ERROR_INVALID_HANDLE);
  const CUdeviceptr fresh = allocate_tracked(4);
  EXPECT_EQ(device_granules(cold), 0u) << "the move still happened, after the device drained";
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kSynchronize), 1);
  expect_bytes(cold, 4);
  free_all({cold, hot, fresh});
}

// Note [Staged promotions] in tiers/granule_arena.h: with the tracked window, what learned brings
// in ahead is copied without a wait, on the device after the events of the blocks' last uses,
// and remapped when a launch touches it.
TEST_F(TrackedWindowTest, WhatLearnedBringsInAheadIsStagedAndFinishedAtItsLaunch) {
  TieredPlacement learned{budgets_, arenas_, window_, tracked_options("learned"), &uses_};
  const auto allocate_in = [&](uint64_t granules) { return allocate_tracked(granules, &learned); };
  const auto launch_in = [&](CUdeviceptr block) { launch_on(kStreamA, block, &learned); };
  std::vector<CUdeviceptr> loop;
  for (int i = 0; i < 5; ++i) loop.push_back(allocate_in(2));  // 10 granules on a budget of 8
  const auto turn = [&] {
    for (const CUdeviceptr block : loop) launch_in(block);
  };
  for (int round = 0; round < 5; ++round) turn();  // locked after a window of 16 launches
  const CUdeviceptr cold = allocate_in(4);  // never used: its room goes to the loop
  turn();
  const TieredStats stats = learned.stats();
  ASSERT_GE(stats.promoted_ahead, 1u);
  EXPECT_GE(stats.staged_granules, 2u);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kQueueAfter), 1) << "one stop staged them";
  turn();  // every staged block is finished by the launch that touches it
  for (const CUdeviceptr block : loop) {
    EXPECT_EQ(arena_.block_containing(block)->staged_granules, 0u);
    expect_bytes(block, 2);
  }
  expect_bytes(cold, 4);
  for (const CUdeviceptr block : loop) {
    uses_.untrack(block);
    EXPECT_EQ(learned.free(0, block), CUDA_SUCCESS);
  }
  uses_.untrack(cold);
  EXPECT_EQ(learned.free(0, cold), CUDA_SUCCESS);
}

// Note [Staged promotions]: a block staged only in part (the driver ran out of memory for the
// rest), with the budget then filled. Its launch finishes the staged part and charges what it
// brings in beyond it like any promotion, however full the budget is.
class PartlyStagedTest : public TrackedWindowTest {
 protected:
  void SetUp() override {
    for (int i = 0; i < 5; ++i) loop_.push_back(allocate_tracked(2, &learned_));  // 10 on 8
    for (int round = 0; round < 5; ++round) {  // locked after a window of 16 launches
      for (const CUdeviceptr block : loop_) launch_in(block);
    }
    const CUdeviceptr gone = allocate_tracked(4, &learned_);
    uses_.untrack(gone);
    ASSERT_EQ(learned_.free(0, gone), CUDA_SUCCESS);  // room the driver must back anew
    // The launch's own block takes the first two granules made, the block ahead one of two.
    ops_.fail(tiers::FakeGranuleOps::kCreate, 4);
    launch_in(loop_[0]);
    launch_in(loop_[1]);
    const auto found = std::ranges::find_if(loop_, [&](CUdeviceptr block) {
      const auto held = arena_.block_containing(block);
      return held->staged_granules != 0 && held->host_granules() != 0;
    });
    ASSERT_NE(found, loop_.end());
    partly_staged_ = *found;
    filler_ = allocate_tracked(budgets_.device_room(0) / kGranuleBytes, &learned_);
    ASSERT_EQ(budgets_.device_room(0), 0u);
  }
  void TearDown() override {
    const tiers::ArenaStats held = arena_.stats();
    EXPECT_LE(held.device_granules + held.pooled_device_granules, 8u) << "past the device budget";
    loop_.push_back(filler_);
    for (const CUdeviceptr block : loop_) {
      expect_bytes(block, arena_.block_containing(block)->granules);
      uses_.untrack(block);
      EXPECT_EQ(learned_.free(0, block), CUDA_SUCCESS);
    }
    TrackedWindowTest::TearDown();
  }
  void launch_in(CUdeviceptr block) { launch_on(kStreamA, block, &learned_); }

  TieredPlacement learned_{budgets_, arenas_, window_, tracked_options("learned"), &uses_};
  std::vector<CUdeviceptr> loop_;
  CUdeviceptr partly_staged_ = 0;
  CUdeviceptr filler_ = 0;
};

TEST_F(PartlyStagedTest, ItsLaunchIsChargedForWhatItBringsIn) {
  launch_in(partly_staged_);
  EXPECT_EQ(arena_.block_containing(partly_staged_)->device_granules, 2u);
  EXPECT_EQ(arena_.block_containing(partly_staged_)->staged_granules, 0u);
}

// What the block still has on the host cannot come in (the launch needs every block on the
// device, and the budget is full): its staged part is finished all the same.
TEST_F(PartlyStagedTest, ItsStagedPartIsFinishedWhenTheRestStaysOnTheHost) {
  core::SubmissionUse use;
  std::vector<uint64_t> words;
  for (const CUdeviceptr block : loop_) {
    if (block == partly_staged_ || arena_.block_containing(block)->device_granules != 0)
      words.push_back(block + 64);
  }
  words.push_back(filler_ + 64);
  uses_.record_words(kStreamA, words, use);
  learned_.before_submission(use.sequence, static_cast<uint32_t>(kStreamA),
                             std::span(use.blocks.data(), use.count));
  learned_.order_after_copies(use, false);
  end_submission(use);
  const auto block = arena_.block_containing(partly_staged_);
  EXPECT_EQ(block->staged_granules, 0u) << "the staged granules were never remapped";
  EXPECT_EQ(block->device_granules, 1u);
}

// Note [The tracked window]: with arenas on two devices the wait is the safe one, and the bits
// stay for a later take.
TEST(TrackedWork, WithTwoDevicesItWaitsForTheWholeDeviceAndKeepsTheBits) {
  tiers::FakeGranuleOps ops;
  core::UseTracker uses;
  constexpr uint64_t kBlock = uint64_t{0x7f00} << 32;
  ASSERT_EQ(uses.track(kBlock, kGranuleBytes, kBlock), core::TrackResult::kTracked);
  core::SubmissionUse use;
  const uint64_t words[] = {kBlock};
  uses.record_words(0xa000, words, use);
  uses.stream_slots().end_call(uses.mark_streams(use));
  std::atomic<uint64_t> devices{0b11};
  TrackedWork tracked(uses, devices);
  const uint64_t bases[] = {kBlock};
  EXPECT_EQ(tracked.wait_for(bases, ops), CUDA_SUCCESS);
  EXPECT_EQ(ops.calls(tiers::FakeGranuleOps::kSynchronize), 1);
  EXPECT_EQ(ops.calls(tiers::FakeGranuleOps::kWaitForStreams), 0);
  const core::BlockId block[] = {kBlock};
  EXPECT_NE(uses.take_streams(block).bits, 0u);
}

// Note [Staged promotions]: a staged copy waits on the device for the event that follows a
// block's last use, and on the host only for a stream that has no such event yet.
TEST(TrackedWork, OrderingACopyWaitsOnTheDeviceWhereAnEventAllows) {
  tiers::FakeGranuleOps ops;
  core::UseTracker uses;
  constexpr uint64_t kStreamA = 0xa000;
  constexpr uint64_t kStreamB = 0xb000;
  constexpr uint64_t kEvent = 0xe1;
  constexpr uint64_t kBlockA = uint64_t{0x7f00} << 32;
  constexpr uint64_t kBlockB = kBlockA + kGranuleBytes;
  ASSERT_EQ(uses.track(kBlockA, kGranuleBytes, kBlockA), core::TrackResult::kTracked);
  ASSERT_EQ(uses.track(kBlockB, kGranuleBytes, kBlockB), core::TrackResult::kTracked);
  const auto submit = [&](uint64_t stream, uint64_t block) {
    core::SubmissionUse use;
    const uint64_t words[] = {block};
    uses.record_words(stream, words, use);
    if (const auto due = uses.stream_slots().end_call(uses.mark_streams(use)))
      uses.stream_slots().recorded(*due, kEvent, 1);
  };
  // B's one submission records no event; A's fourth, the last of all, does (Note [Last uses by
  // event]).
  submit(kStreamB, kBlockB);
  for (uint64_t i = 0; i < core::StreamSlots::kRecordEvery; ++i) submit(kStreamA, kBlockA);
  std::atomic<uint64_t> devices{0b1};
  TrackedWork tracked(uses, devices);
  const uint64_t bases[] = {kBlockA, kBlockB};
  uint64_t since = 0;
  EXPECT_EQ(tracked.order_after(bases, ops, since), CUDA_SUCCESS);
  EXPECT_EQ(ops.events_queued_after(), std::vector<uint64_t>{kEvent});
  EXPECT_EQ(ops.streams_waited_for(), std::vector<uint64_t>{kStreamB});
  EXPECT_EQ(ops.calls(tiers::FakeGranuleOps::kSynchronize), 0);
  EXPECT_FALSE(tracked.queued_since(kBlockA, since));
  submit(kStreamB, kBlockA);
  EXPECT_TRUE(tracked.queued_since(kBlockA, since));
  EXPECT_FALSE(tracked.queued_since(kBlockB, since));
  // A graph launch may touch every block; a move of another block taking its stream bits does
  // not make that untrue.
  core::SubmissionUse graph;
  uses.record_everything(kStreamA, graph);
  uses.stream_slots().end_call(uses.mark_streams(graph));
  const uint64_t other[] = {kBlockA};
  EXPECT_EQ(tracked.wait_for(other, ops), CUDA_SUCCESS);
  EXPECT_TRUE(tracked.queued_since(kBlockB, since));
}

// Note [Staged promotions]: a graph that writes a staged block in place after its copy was
// queued is copied again at the finish, even when moves of other blocks took the graph's stream
// bits in between.
TEST_F(TrackedWindowTest, AGraphsWriteToAStagedBlockSurvivesOtherMoves) {
  std::atomic<uint64_t> devices{0b1};
  TrackedWork tracked(uses_, devices);
  const auto block_on_host = [&] {
    CUdeviceptr base = 0;
    EXPECT_EQ(arena_.allocate(2 * kGranuleBytes, 0, &base), CUDA_SUCCESS);
    EXPECT_EQ(uses_.track(base, 2 * kGranuleBytes, base), core::TrackResult::kTracked);
    for (uint64_t i = 0; i < 2; ++i) ops_.write(base + i * kGranuleBytes, base + i);
    return base;
  };
  const auto promote = [&](CUdeviceptr base, bool staged) {
    const tiers::GranuleMove promotion{.base = base, .to = GranuleKind::kDevice, .granules = 0};
    return staged ? arena_.stage(std::span(&promotion, 1), window_.close(), tracked)
                  : arena_.move(std::span(&promotion, 1), window_.close(), &tracked);
  };
  for (const bool other_staged : {false, true}) {
    const CUdeviceptr staged = block_on_host();
    const CUdeviceptr other = block_on_host();
    ASSERT_EQ(promote(staged, true).to_device, 2u);
    core::SubmissionUse graph;
    uses_.record_everything(kStreamB, graph);
    end_submission(graph);
    ops_.write(staged, 0x5eed);  // the graph's kernel writes the host granule after the copy
    ASSERT_EQ(promote(other, other_staged).to_device, 2u);  // takes the graph's bits
    ASSERT_EQ(promote(staged, false).result, CUDA_SUCCESS);  // the launch that touches it
    EXPECT_EQ(ops_.read(staged), 0x5eedu) << (other_staged ? "other staged" : "other moved");
    EXPECT_EQ(ops_.read(staged + kGranuleBytes), staged + 1);
    for (const CUdeviceptr base : {staged, other}) {
      uses_.untrack(base);
      ASSERT_TRUE(arena_.free(base));
    }
  }
  arena_.trim();  // the arena alone ran here: the budgets were never charged
}

// A stage takes the "every block" bits of a graph and waits for the graph only on the arena's
// stream; a move on the stream that follows must not remap a block the graph may touch before
// the graph is over (Note [Moves copied on the stream]).
TEST_F(TrackedWindowTest, AMoveOnTheStreamAfterAStageWaitsForTheGraphTheStageTook) {
  std::atomic<uint64_t> devices{0b1};
  TrackedWork tracked(uses_, devices);
  constexpr uint64_t kGraphEvent = 0xe1;
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 2; ++i) {
    CUdeviceptr base = 0;
    ASSERT_EQ(arena_.allocate(2 * kGranuleBytes, 0, &base), CUDA_SUCCESS);
    ASSERT_EQ(uses_.track(base, 2 * kGranuleBytes, base), core::TrackResult::kTracked);
    blocks.push_back(base);
  }
  for (uint64_t i = 0; i < core::StreamSlots::kRecordEvery; ++i) {  // graphs, then an event
    core::SubmissionUse graph;
    uses_.record_everything(kStreamB, graph);
    if (const auto due = uses_.stream_slots().end_call(uses_.mark_streams(graph)))
      uses_.stream_slots().recorded(*due, kGraphEvent, 1);
  }
  const tiers::GranuleMove stage{.base = blocks[0], .to = GranuleKind::kDevice, .granules = 0};
  ASSERT_EQ(arena_.stage(std::span(&stage, 1), window_.close(), tracked).to_device, 2u);
  EXPECT_EQ(ops_.events_queued_after(), std::vector<uint64_t>{kGraphEvent});
  const int host_waits = ops_.calls(tiers::FakeGranuleOps::kWait);
  const tiers::GranuleMove promotion{.base = blocks[1], .to = GranuleKind::kDevice, .granules = 0};
  EXPECT_EQ(arena_.move_on_stream(std::span(&promotion, 1), window_.close(), tracked).on_stream,
            2u);
  EXPECT_EQ(ops_.calls(tiers::FakeGranuleOps::kWait), host_waits + 1)
      << "remapped while the graph the stage took may still run";
  ops_.finish_copies();
  for (const CUdeviceptr base : blocks) {
    uses_.untrack(base);
    ASSERT_TRUE(arena_.free(base));
  }
  arena_.move({}, window_.close());  // retires the copy and its event
  arena_.trim();  // the arena alone ran here: the budgets were never charged
}

namespace {

// Note [One way through for a submission]: what a submission hook does around its driver call,
// through SubmissionOrder, with the driver's events faked.
class FakeSubmissionEvents final : public SubmissionEvents {
 public:
  uint64_t current_context() noexcept override { return context; }
  uint64_t create() noexcept override {
    ++created;
    return next_event++;
  }
  bool record(uint64_t event, uint64_t stream) noexcept override {
    if (refuse) return false;
    records.emplace_back(event, stream);
    return true;
  }
  void destroy(uint64_t event) noexcept override { destroyed.push_back(event); }

  uint64_t context = 0xc0;  // 0: the thread has none
  bool refuse = false;      // every record refused, as a stream of another context's would be
  uint64_t next_event = 0xe1;
  int created = 0;
  std::vector<std::pair<uint64_t, uint64_t>> records;  // event, stream
  std::vector<uint64_t> destroyed;
};

class SubmissionOrderTest : public TrackedWindowTest {
 protected:
  SubmissionOrderTest() { config_.window = WindowMode::kTracked; }

  // A kernel on `stream` whose one argument points into `block`, through the order.
  void submit_on(uint64_t stream, CUdeviceptr block) {
    core::SubmissionUse use;
    const uint64_t words[] = {block + 64};
    uses_.record_words(stream, words, use);
    auto passage = order_.submit(use);
    passage.done();
  }

  FakeSubmissionEvents events_;
  core::CaptureGate captures_;
  TieredConfig config_;
  SubmissionOrder order_{tracked_, window_, uses_, captures_, config_, events_};
};

TEST_F(SubmissionOrderTest, ASubmissionBringsItsBlockInBeforeItsCall) {
  const CUdeviceptr other = allocate_tracked(2);
  const CUdeviceptr held = allocate_tracked(8);  // the whole budget: `other` went to the host
  ASSERT_EQ(device_granules(other), 0u);
  submit_on(kStreamA, other);
  EXPECT_EQ(device_granules(other), 2u);
  expect_bytes(other, 2);
  expect_bytes(held, 8);
  free_all({held, other});
}

TEST_F(SubmissionOrderTest, EveryFewSubmissionsOfAStreamRecordAnEventOnIt) {
  const CUdeviceptr block = allocate_tracked(1);
  for (uint64_t i = 0; i < 2 * core::StreamSlots::kRecordEvery; ++i) submit_on(kStreamA, block);
  ASSERT_EQ(events_.records.size(), 2u);
  EXPECT_EQ(events_.records[0].second, kStreamA);
  EXPECT_EQ(events_.records[1].second, kStreamA);
  EXPECT_EQ(events_.created, 2) << "each entry of the stream's ring made once";
  EXPECT_TRUE(events_.destroyed.empty());
  free_all({block});
}

TEST_F(SubmissionOrderTest, DuringACaptureNoEventIsRecorded) {
  const CUdeviceptr block = allocate_tracked(1);
  const auto change_captures = [&](bool begun) {
    const auto changing = captures_.change();
    begun ? captures_.begun(kStreamB, 0) : captures_.ended(kStreamB, 0);
  };
  change_captures(/*begun=*/true);
  for (uint64_t i = 0; i < 2 * core::StreamSlots::kRecordEvery; ++i) submit_on(kStreamA, block);
  EXPECT_EQ(events_.created, 0);
  EXPECT_TRUE(events_.records.empty());
  change_captures(/*begun=*/false);
  free_all({block});
}

TEST_F(SubmissionOrderTest, AnEventTheStreamRefusesIsDestroyedAndNoneIsMadeWithoutAContext) {
  const CUdeviceptr block = allocate_tracked(1);
  events_.refuse = true;
  for (uint64_t i = 0; i < core::StreamSlots::kRecordEvery; ++i) submit_on(kStreamA, block);
  EXPECT_EQ(events_.created, 1);
  EXPECT_EQ(events_.destroyed, std::vector<uint64_t>{0xe1});
  events_.refuse = false;
  events_.context = 0;
  for (uint64_t i = 0; i < core::StreamSlots::kRecordEvery; ++i) submit_on(kStreamA, block);
  EXPECT_EQ(events_.created, 1) << "no context, no event";
  EXPECT_TRUE(events_.records.empty());
  free_all({block});
}

TEST_F(SubmissionOrderTest, TheSafeWindowMarksNoStreamAndRecordsNothing) {
  const CUdeviceptr block = allocate_tracked(1);
  config_.window = WindowMode::kSafe;
  for (uint64_t i = 0; i < 2 * core::StreamSlots::kRecordEvery; ++i) submit_on(kStreamA, block);
  EXPECT_EQ(events_.created, 0);
  EXPECT_EQ(uses_.stream_slots().last_mark(), 0u);
  free_all({block});
}

}  // namespace
}  // namespace vramspill::placement
