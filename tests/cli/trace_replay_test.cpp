// `vramspill replay`'s model of tiered mode (tools/cli/trace_replay.h): a trace's tiered blocks
// and launches as replay steps, each policy's moves on hand-built steps, and Belady's optimum as
// the floor.
#include "trace_replay.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "trace_events.h"

namespace vramspill::cli {
namespace {

using telemetry::Trace;
using telemetry::TraceEvent;
using telemetry::TraceEventKind;
using testing::event;
using testing::use_event;

constexpr uint64_t kGranule = uint64_t{2} << 20;

ReplayStep alloc(uint64_t block, uint64_t granules) {
  return {.kind = ReplayStep::Kind::kAlloc, .stream = 0, .blocks = {block}, .granules = granules};
}

ReplayStep use(std::vector<uint64_t> blocks) {
  return {.kind = ReplayStep::Kind::kUse, .stream = 0, .blocks = std::move(blocks), .granules = 0};
}

// `blocks` one-granule blocks on a device of `capacity` granules, then `rounds` launches over
// each in turn: the loop longer than the budget that makes lru miss on every use.
ReplayInput cyclic_scan(uint64_t blocks, uint64_t capacity, int rounds) {
  ReplayInput input;
  input.budget_granules = capacity;
  for (uint64_t block = 0; block < blocks; ++block) input.steps.push_back(alloc(block, 1));
  for (int round = 0; round < rounds; ++round) {
    for (uint64_t block = 0; block < blocks; ++block) input.steps.push_back(use({block}));
  }
  return input;
}

TEST(TraceReplay, ACyclicScanLongerThanTheBudgetMakesLruFetchEveryUse) {
  const ReplayInput input = cyclic_scan(4, 3, 5);
  const ReplayResult lru = replay(input, "lru");
  // The fourth block's allocation evicts the first; from then on every use finds its block
  // evicted by the one before.
  EXPECT_EQ(lru.placed_granules, 4u);
  EXPECT_EQ(lru.promoted_granules, 20u);
  EXPECT_EQ(lru.evicted_granules, 21u);
  EXPECT_EQ(lru.moves, 41u);
  EXPECT_EQ(lru.in_place_uses, 0u);
  // Every promotion is made at the launch that needs it, which stops for it (and so did the
  // fourth allocation).
  EXPECT_EQ(lru.late_promotions, 20u);
  EXPECT_EQ(lru.ahead_promotions, 0u);
  EXPECT_EQ(lru.windows, 21u);
  // MIN evicts the block needed last: after the three first placements, one miss in every three
  // of the 21 uses left (3 + 7).
  EXPECT_EQ(optimal_fetched_granules(input), 10u);
}

TEST(TraceReplay, NoPolicyThatPromotesEveryUseFetchesLessThanTheOptimum) {
  const ReplayInput input = cyclic_scan(7, 4, 6);
  const uint64_t optimum = optimal_fetched_granules(input);
  for (const char* policy : {"fifo", "largest", "lru"}) {
    const ReplayResult result = replay(input, policy);
    EXPECT_EQ(result.in_place_uses, 0u) << policy;
    EXPECT_GE(result.fetched_granules(), optimum) << policy;
  }
}

TEST(TraceReplay, RoomForALaunchsPromotionsNeverEvictsItsOwnBlocks) {
  ReplayInput input;
  input.budget_granules = 2;
  input.steps = {alloc(0, 1), alloc(1, 1), alloc(2, 1), use({0, 2})};
  // Block 2's allocation evicted 0; the launch needs 0 back, and only 1 may make room.
  const ReplayResult lru = replay(input, "lru");  // the policy aborts on a broken contract
  EXPECT_EQ(lru.evicted_granules, 2u);
  EXPECT_EQ(lru.promoted_granules, 1u);
}

// A launch whose promotions would not fit even with every victim gone evicts nothing.
TEST(TraceReplay, ALaunchThatCannotPromoteEvictsNothing) {
  ReplayInput input;
  input.budget_granules = 4;
  input.steps = {alloc(0, 2), alloc(1, 1), alloc(2, 3), use({0, 2})};
  // Block 2's allocation evicts 0 (a stop). The launch would need 0's two granules back, and
  // only 1, of one granule, could go: it stays, and 0 is reached in place.
  const ReplayResult lru = replay(input, "lru");
  EXPECT_EQ(lru.evicted_granules, 2u);
  EXPECT_EQ(lru.promoted_granules, 0u);
  EXPECT_EQ(lru.in_place_uses, 1u);
  EXPECT_EQ(lru.windows, 1u);
}

TEST(TraceReplay, WhatDoesNotFitIsTouchedInPlace) {
  ReplayInput input;
  input.budget_granules = 2;
  input.steps = {alloc(0, 3), use({0})};  // a block larger than the whole budget
  const ReplayResult lru = replay(input, "lru");
  EXPECT_EQ(lru.placed_granules, 2u);
  EXPECT_EQ(lru.promoted_granules, 0u);
  EXPECT_EQ(lru.in_place_uses, 1u);
  EXPECT_EQ(lru.in_place_granules, 1u);
}

// Note [Evicting part of a block] in policies/eviction_policy.h: learned's last victim gives up
// only the granules the need leaves, and only those come back at its next use; lru's victims move
// whole.
TEST(TraceReplay, LearnedsLastVictimGivesUpOnlyWhatTheNeedLeaves) {
  ReplayInput input;
  input.budget_granules = 10;
  input.steps = {alloc(0, 8), use({0}), alloc(1, 4), use({0})};
  // Block 1 needs two granules of block 0's room; the launch after needs them back, from block 1.
  const ReplayResult learned = replay(input, "learned");
  EXPECT_EQ(learned.placed_granules, 12u);
  EXPECT_EQ(learned.evicted_granules, 4u);
  EXPECT_EQ(learned.promoted_granules, 2u);
  EXPECT_EQ(learned.moves, 3u);
  // lru sends all of block 0 to the host for block 1, then all of block 1 for block 0.
  const ReplayResult lru = replay(input, "lru");
  EXPECT_EQ(lru.placed_granules, 12u);
  EXPECT_EQ(lru.evicted_granules, 12u);
  EXPECT_EQ(lru.promoted_granules, 8u);
}

// Note [Promoting ahead] in policies/eviction_policy.h: locked on the loop, learned brings in
// the next launches' blocks with a launch's own, into the room of a block the loop never uses.
TEST(TraceReplay, PromotionsMadeAheadAreNotLate) {
  ReplayInput input = cyclic_scan(5, 4, 5);  // locked after a window of 16 launches
  input.steps.push_back(alloc(5, 2));        // never used: learned evicts two loop blocks for it
  for (int round = 0; round < 2; ++round) {
    for (uint64_t block = 0; block < 5; ++block) input.steps.push_back(use({block}));
  }
  const ReplayResult learned = replay(input, "learned");
  EXPECT_GE(learned.ahead_promotions, 1u);
  EXPECT_EQ(learned.late_promotions + learned.ahead_promotions, learned.promoted_granules)
      << "one granule a block";
  EXPECT_GE(learned.fetched_granules(), optimal_fetched_granules(input));
}

TEST(TraceReplay, AnUnknownPolicyIsAnError) {
  EXPECT_THROW(replay(cyclic_scan(2, 1, 1), "belady"), std::invalid_argument);
}

TEST(TraceReplay, TheInputIsTheDevicesTieredBlocksAndLaunchesInTimeOrder) {
  using core::Route;
  Trace trace;
  TraceEvent budget = event(0, TraceEventKind::kDevice, Route::kMemAlloc, 0, 64 * kGranule);
  budget.limit_bytes = 8 * kGranule;
  trace.events = {
      budget, event(10, TraceEventKind::kAlloc, Route::kTiered, 0xa000, 3 << 20),
      event(11, TraceEventKind::kAlloc, Route::kMemAlloc, 0xb000, 1 << 20),   // not tiered
      event(12, TraceEventKind::kAlloc, Route::kTiered, 0xc000, 1 << 20, 1),  // device 1
      event(13, TraceEventKind::kEvict, Route::kTiered, 0xa000, kGranule),
      // Recorded out of order by two threads: the use came before the promotion.
      event(15, TraceEventKind::kPromote, Route::kTiered, 0xa000, kGranule),
      use_event(14, {0xa000, 0xd000}),  // 0xd000 is no block
      event(16, TraceEventKind::kFree, Route::kTiered, 0xa000, 3 << 20),
      event(17, TraceEventKind::kAlloc, Route::kTiered, 0xa000, 4 << 20),  // the base again
      use_event(18, {0xa000})};
  const ReplayInput input = replay_input(trace, 0, 0);
  EXPECT_EQ(input.budget_granules, 8u);
  EXPECT_EQ(input.blocks, 2u);
  EXPECT_EQ(input.block_bytes, uint64_t{7} << 20);
  EXPECT_EQ(input.submissions, 2u);
  EXPECT_EQ(input.recorded_evicted_bytes, kGranule);
  EXPECT_EQ(input.recorded_promoted_bytes, kGranule);
  ASSERT_EQ(input.steps.size(), 5u);
  EXPECT_EQ(input.steps[0].kind, ReplayStep::Kind::kAlloc);
  EXPECT_EQ(input.steps[0].granules, 2u);
  EXPECT_EQ(input.steps[1].kind, ReplayStep::Kind::kUse);
  EXPECT_EQ(input.steps[1].stream, 7u);
  EXPECT_EQ(input.steps[1].blocks, std::vector<uint64_t>{0});
  EXPECT_EQ(input.steps[2].kind, ReplayStep::Kind::kFree);
  EXPECT_EQ(input.steps[3].blocks, std::vector<uint64_t>{1});  // a new block at the old base
  EXPECT_EQ(input.steps[4].blocks, std::vector<uint64_t>{1});
  EXPECT_EQ(replay_input(trace, 0, 20 << 20).budget_granules, 10u);  // --budget
}

// Note [Allocations a trace shows live]: as export and report do, an alloc at a live base and a
// free of no live block are left out and counted, not taken for a new block or a free.
TEST(TraceReplay, ADamagedTracesAllocAtALiveBaseIsLeftOutAndCounted) {
  using core::Route;
  Trace trace;
  trace.events = {event(10, TraceEventKind::kAlloc, Route::kTiered, 0xa000, 4 << 20),
                  event(11, TraceEventKind::kAlloc, Route::kTiered, 0xa000, 8 << 20),
                  use_event(12, {0xa000}),
                  event(13, TraceEventKind::kFree, Route::kTiered, 0xa000, 4 << 20),
                  event(14, TraceEventKind::kFree, Route::kTiered, 0xa000, 4 << 20)};
  const ReplayInput input = replay_input(trace, 0, 8 * kGranule);
  EXPECT_EQ(input.blocks, 1u);
  EXPECT_EQ(input.block_bytes, uint64_t{4} << 20);
  EXPECT_EQ(input.left_out.repeated_allocations, 1u);
  EXPECT_EQ(input.left_out.unmatched_frees, 1u);
  ASSERT_EQ(input.steps.size(), 3u);
  EXPECT_EQ(input.steps[1].blocks, std::vector<uint64_t>{0});
  EXPECT_EQ(input.steps[2].kind, ReplayStep::Kind::kFree);
}

// A block the policies cannot hold: the reader refuses such a trace (Note [What a trace may
// hold] in trace_reader.h), and a trace built otherwise is refused here, not left to abort.
TEST(TraceReplay, ABlockOfNoBytesIsRefusedAndTheLargestRoundsUp) {
  Trace trace;
  trace.events = {event(200, TraceEventKind::kAlloc, core::Route::kTiered, 0x1000, 0),
                  use_event(300, {0x1000})};
  EXPECT_THROW(replay_input(trace, 0, 8 * kGranule), std::runtime_error);
  trace.events[0].bytes = UINT64_MAX;  // rounded up without overflowing to no granules
  EXPECT_EQ(replay_input(trace, 0, 8 * kGranule).steps[0].granules, (UINT64_MAX >> 21) + 1);
}

TEST(TraceReplay, ATraceWithoutTieredBlocksOrABudgetCannotBeReplayed) {
  Trace trace;
  trace.events = {event(1, TraceEventKind::kAlloc, core::Route::kSpillHost, 0xa000, 1 << 20)};
  try {
    replay_input(trace, 0, 0);
    ADD_FAILURE() << "replayed a trace without tiered blocks";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(),
                 "no tiered block on device 0: record the job in tiered mode ([spill] mode = "
                 "\"tiered\")");
  }
  trace.events = {event(1, TraceEventKind::kAlloc, core::Route::kTiered, 0xa000, 1 << 20)};
  try {
    replay_input(trace, 0, 0);
    ADD_FAILURE() << "replayed a trace without a budget";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "the trace gives no budget for device 0: name one with --budget");
  }
}

}  // namespace
}  // namespace vramspill::cli
