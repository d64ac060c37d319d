// Moves copied on the stream (Note [Moves copied on the stream] in tiers/granule_arena.h):
// remapped at once, copied while the host goes on, waited for by the submissions that touch the
// blocks, their old granules reused only by what follows the copy on the arena's stream, and
// retired only once the copy is done.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "arena_test_fixtures.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kStream = 0x5157;

class GranuleStreamMoveTest : public GranuleMoveTest {
 protected:
  MoveOutcome move_on_stream(std::vector<CUdeviceptr> bases, GranuleKind to = kDevice) {
    std::vector<GranuleMove> moves;
    for (const CUdeviceptr base : bases) moves.push_back({.base = base, .to = to, .granules = 0});
    const core::RemapWindow::Exclusive exclusive = window_.close();
    return arena_.move_on_stream(moves, exclusive, queued_);
  }
  // What a submission that touches `bases` is made to wait for, on its stream.
  std::vector<uint64_t> waits_of(std::vector<uint64_t> bases, bool everything = false) {
    const std::size_t before = ops_.stream_orders().size();
    const core::RemapWindow::Submission submission = window_.enter();
    EXPECT_EQ(arena_.order_after_copies(kStream, bases, everything, false), CUDA_SUCCESS);
    std::vector<uint64_t> events;
    for (std::size_t i = before; i < ops_.stream_orders().size(); ++i) {
      EXPECT_EQ(ops_.stream_orders()[i].stream, kStream);
      events.push_back(ops_.stream_orders()[i].event);
    }
    return events;
  }
  // Any operation in a closed window retires the copies that are done: here, an empty batch.
  void retire() { move({}); }

  FakeQueuedWork queued_;
};

TEST_F(GranuleStreamMoveTest, APromotionIsRemappedAtOnceAndItsCopyLeftRunning) {
  const CUdeviceptr base = tagged_block(3, 0);
  const MoveOutcome outcome = move_on_stream({base});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_device, 3u);
  EXPECT_EQ(outcome.on_stream, 3u);
  EXPECT_EQ(queued_.waits, 1) << "the remap waits for the work that may touch the block";
  EXPECT_EQ(ops_.calls(Call::kWait), 0) << "nothing waits for the copy";
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "one copy for the whole batch";
  EXPECT_EQ(ops_.copies_in_flight(), 1u);
  EXPECT_EQ(kinds(base, 3), (std::vector{kDevice, kDevice, kDevice}));
  expect_tags(base, 3);
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.device_granules, 3u);
  EXPECT_EQ(stats.pooled_host_granules, 3u) << "pooled at once, for the stream's next copies";
  EXPECT_EQ(ops_.reservations(), 2u) << "the block's range and the homes' (Note [Granule homes])";
  EXPECT_EQ(ops_.mappings(), 3u + 6) << "the block's and, at their homes, the old and new granules";
  EXPECT_EQ(ops_.live_events(), 1u);
}

TEST_F(GranuleStreamMoveTest, AnEvictionToo) {
  const CUdeviceptr base = tagged_block(2, 2);
  const MoveOutcome outcome = move_on_stream({base}, kHost);
  EXPECT_EQ(outcome.to_host, 2u);
  EXPECT_EQ(outcome.on_stream, 2u);
  EXPECT_EQ(ops_.calls(Call::kWait), 0);
  EXPECT_EQ(kinds(base, 2), (std::vector{kHost, kHost}));
  expect_tags(base, 2);
  EXPECT_EQ(waits_of({base}).size(), 1u) << "its next user waits for the copy";
}

TEST_F(GranuleStreamMoveTest, APromotionReusesWhatAnEvictionJustGaveUp) {
  const CUdeviceptr victim = tagged_block(2, 2);
  const CUdeviceptr promoted = tagged_block(2, 0);
  move_on_stream({victim}, kHost);
  const int created = ops_.calls(Call::kCreate);
  EXPECT_EQ(move_on_stream({promoted}).to_device, 2u);
  EXPECT_EQ(ops_.calls(Call::kCreate), created) << "the device granules come from the pool";
  EXPECT_EQ(ops_.calls(Call::kWait), 0) << "the stream orders the second copy after the first";
  expect_tags(victim, 2);
  expect_tags(promoted, 2);
}

TEST_F(GranuleStreamMoveTest, SubmissionsThatMayTouchTheBlockWaitForItsCopy) {
  const CUdeviceptr moving = tagged_block(2, 0);
  const CUdeviceptr other = tagged_block(1, 1);
  move_on_stream({moving});
  const std::vector<uint64_t> waits = waits_of({other, moving});
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits_of({other}), std::vector<uint64_t>{}) << "another block's work goes on";
  EXPECT_EQ(waits_of({}, true), waits) << "a submission that cannot say what it touches waits";
  EXPECT_FALSE(ops_.stream_orders().back().capturing);
}

TEST_F(GranuleStreamMoveTest, WhatIsCopiedRetiresInTheNextWindowAndNotBefore) {
  const CUdeviceptr base = tagged_block(2, 0);
  move_on_stream({base});
  retire();
  EXPECT_EQ(ops_.live_events(), 1u) << "the copy is not done: nothing is retired";
  ops_.finish_copies();
  EXPECT_EQ(waits_of({base}).size(), 1u) << "until then, submissions still wait (for nothing)";
  retire();
  EXPECT_EQ(ops_.live_events(), 0u);
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{});
  expect_tags(base, 2);
}

TEST_F(GranuleStreamMoveTest, TrimGivesBackOnlyWhatNoCopyMayUse) {
  const CUdeviceptr base = tagged_block(3, 0);
  move_on_stream({base});
  // Past the recent demand (Note [What the pools keep]) one host granule is kept; the three
  // pooled ones may still be read.
  for (int i = 0; i < 8; ++i) arena_.trim();
  EXPECT_EQ(arena_.stats().pooled_host_granules, 3u);
  EXPECT_EQ(ops_.calls(Call::kWait), 0) << "trim does not wait";
  ops_.finish_copies();
  retire();
  arena_.trim();
  EXPECT_EQ(arena_.stats().pooled_host_granules, 1u);
}

TEST_F(GranuleStreamMoveTest, GivingDeviceGranulesBackWaitsForTheCopies) {
  const CUdeviceptr base = tagged_block(2, 2);
  move_on_stream({base}, kHost);
  arena_.give_back_device_granules(2);  // memory another allocation needs now
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 0u);
  EXPECT_EQ(ops_.copies_in_flight(), 0u);
  EXPECT_EQ(ops_.mappings(), 2u + 2) << "the block's and its granules' homes; the released "
                                        "granules' homes went with them";
}

TEST_F(GranuleStreamMoveTest, ANewBlockWaitsForTheCopiesBeforeTakingPooledGranules) {
  const CUdeviceptr base = tagged_block(2, 2);
  move_on_stream({base}, kHost);
  const CUdeviceptr fresh = allocate(2 * kGranuleBytes, 2);
  EXPECT_EQ(ops_.calls(Call::kWait), 1) << "the program may write it at once";
  EXPECT_EQ(ops_.copies_in_flight(), 0u);
  EXPECT_EQ(kinds(fresh, 2), (std::vector{kDevice, kDevice}));
  expect_tags(base, 2);
}

TEST_F(GranuleStreamMoveTest, AMovedBlockMayMoveBackAtOnce) {
  const CUdeviceptr base = tagged_block(2, 0);
  move_on_stream({base});
  const core::RemapWindow::Exclusive exclusive = window_.close();
  const GranuleMove eviction{.base = base, .to = kHost, .granules = 0};
  EXPECT_EQ(arena_.move(std::span(&eviction, 1), exclusive, &queued_).to_host, 2u);
  EXPECT_EQ(kinds(base, 2), (std::vector{kHost, kHost}));
  expect_tags(base, 2);
}

// Note [Resetting the device] in hooks/device_reset.h: a reset took the copy in flight and its
// event with the context. The arena forgets both, neither waiting for the copy nor destroying the
// event (the fixture checks that no event it never recorded is given back), and the blocks'
// granules move again on new lanes.
TEST_F(GranuleStreamMoveTest, AResetForgetsTheCopiesInFlightAndTheirEvents) {
  const CUdeviceptr base = tagged_block(2, 0);
  move_on_stream({base});
  ASSERT_EQ(ops_.live_events(), 1u);
  arena_.forget_context();
  EXPECT_EQ(ops_.context_resets(), 1);
  EXPECT_EQ(ops_.calls(Call::kWait), 0) << "nothing is left to wait for";
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{}) << "no submission waits for a lost event";
  retire();
  ASSERT_TRUE(arena_.free(base));
  const CUdeviceptr next = tagged_block(2, 0);
  EXPECT_EQ(move_on_stream({next}).to_device, 2u);
  expect_tags(next, 2);
}

TEST_F(GranuleStreamMoveTest, FreeingABlockACopyWritesWaitsForTheCopy) {
  const CUdeviceptr base = tagged_block(2, 0);
  move_on_stream({base});
  ASSERT_TRUE(arena_.free(base));
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(ops_.mappings(), 4u) << "only the homes of the pooled granules, old and new";
  EXPECT_EQ(ops_.reservations(), 1u) << "the homes'";
  EXPECT_EQ(ops_.live_events(), 1u) << "the event goes only in a closed window";
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{});
  retire();
  EXPECT_EQ(ops_.live_events(), 0u);
}

// Note [Copies in flight beside a capture]: while a capture is in progress the ops refuse to wait
// for the copies. A block the program frees then, which its copy still writes, keeps its granules
// mapped, held and out of the pools (nothing leaks), until a later settling finishes the free.
TEST_F(GranuleStreamMoveTest, BesideACaptureAFreedBlockKeepsItsGranulesUntilTheCopiesAreOver) {
  const CUdeviceptr base = tagged_block(2, 0);
  move_on_stream({base});
  ops_.fail(Call::kWait, 1, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_TRUE(arena_.free(base));
  ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.device_granules, 2u) << "held while the copy may still write them";
  EXPECT_EQ(stats.leaked_granules, 0u);
  EXPECT_EQ(stats.leaked_ranges, 0u);
  EXPECT_EQ(ops_.reservations(), 2u) << "the block's range and the homes'";
  std::string problem;
  EXPECT_TRUE(arena_.check_invariants(&problem)) << problem;

  const CUdeviceptr fresh = allocate(2 * kGranuleBytes, 2);  // the capture is over: it settles
  EXPECT_EQ(ops_.copies_in_flight(), 0u);
  stats = arena_.stats();
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(stats.device_granules, 2u) << "the new block's, taken from the freed block's";
  EXPECT_EQ(stats.leaked_granules, 0u);
  EXPECT_EQ(ops_.reservations(), 2u) << "the new block's range and the homes'";
  EXPECT_TRUE(arena_.check_invariants(&problem)) << problem;
  EXPECT_TRUE(arena_.free(fresh));
}

// ... and a block the program allocates then takes no pooled granule a copy may still use: the
// device granules the eviction gave up stay pooled, and new ones back the block.
TEST_F(GranuleStreamMoveTest, BesideACaptureANewBlockTakesOnlySettledGranules) {
  const CUdeviceptr base = tagged_block(2, 2);
  move_on_stream({base}, kHost);
  ASSERT_EQ(arena_.stats().pooled_device_granules, 2u);
  ops_.fail_always(Call::kWait, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // the capture runs
  const CUdeviceptr fresh = allocate(2 * kGranuleBytes, 2);
  ops_.heal();
  EXPECT_EQ(ops_.copies_in_flight(), 1u) << "not waited for";
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u) << "still the copy's to read";
  EXPECT_EQ(kinds(fresh, 2), (std::vector{kDevice, kDevice}));
  expect_tags(base, 2);
  std::string problem;
  EXPECT_TRUE(arena_.check_invariants(&problem)) << problem;
}

TEST_F(GranuleStreamMoveTest, ACopyThatCannotBeQueuedMovesNothing) {
  const CUdeviceptr base = tagged_block(2, 0);
  ops_.fail(Call::kCopy, 1, CUDA_ERROR_LAUNCH_FAILED);
  const MoveOutcome outcome = move_on_stream({base});
  EXPECT_EQ(outcome.result, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(outcome.to_device, 0u);
  EXPECT_EQ(outcome.on_stream, 0u);
  EXPECT_EQ(ops_.calls(Call::kWait), 1) << "for what was queued before the failure";
  EXPECT_EQ(ops_.live_events(), 0u);
  EXPECT_EQ(kinds(base, 2), (std::vector{kHost, kHost}));
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u);
  expect_tags(base, 2);
}

TEST_F(GranuleStreamMoveTest, WithoutAnEventTheHostWaitsForTheCopy) {
  const CUdeviceptr base = tagged_block(2, 0);
  ops_.fail(Call::kRecord, 1, CUDA_ERROR_UNKNOWN);
  const MoveOutcome outcome = move_on_stream({base});
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(outcome.on_stream, 0u) << "nothing for submissions to wait for";
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(ops_.live_events(), 0u) << "none was made";
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{});
  expect_tags(base, 2);
}

TEST_F(GranuleStreamMoveTest, ARemapThatFailsLeavesTheRestOfTheBatchWhereItWas) {
  const CUdeviceptr first = tagged_block(2, 0);
  const CUdeviceptr second = tagged_block(2, 0);
  // The homes of the four new granules and of the four old ones, the first block's run; the
  // second block's run fails.
  ops_.fail(Call::kMap, 10, CUDA_ERROR_UNKNOWN);
  const MoveOutcome outcome = move_on_stream({first, second});
  EXPECT_EQ(outcome.result, CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(kinds(first, 2), (std::vector{kDevice, kDevice}));
  EXPECT_EQ(kinds(second, 2), (std::vector{kHost, kHost}));
  expect_tags(first, 2);
  expect_tags(second, 2);
  EXPECT_EQ(waits_of({second}), std::vector<uint64_t>{}) << "nothing of it moved";
  EXPECT_EQ(waits_of({first}).size(), 1u);
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.pooled_device_granules, 2u) << "the new granules it did not take";
  EXPECT_EQ(stats.pooled_host_granules, 2u);
}

TEST_F(GranuleStreamMoveTest, BeyondTheCopiesInFlightTheCopyIsMadeInTheWindow) {
  std::vector<CUdeviceptr> bases;
  for (int i = 0; i < 9; ++i) bases.push_back(tagged_block(1, 0));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(move_on_stream({bases[i]}).on_stream, 1u) << "move " << i;
  EXPECT_EQ(ops_.calls(Call::kWait), 0);
  const MoveOutcome ninth = move_on_stream({bases[8]});
  EXPECT_EQ(ninth.to_device, 1u);
  EXPECT_EQ(ninth.on_stream, 0u);
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(waits_of({}, true).size(), 8u);
  retire();  // the window's copy waited for the stream: everything before it is done
  EXPECT_EQ(ops_.live_events(), 0u);
  for (const CUdeviceptr base : bases) expect_tags(base, 1);
}

TEST_F(GranuleStreamMoveTest, CopiesThatCannotBeWaitedForLeaveTheirNewGranulesToTheDriver) {
  const CUdeviceptr base = tagged_block(2, 0);
  ops_.fail(Call::kCopy, 1, CUDA_ERROR_LAUNCH_FAILED);
  ops_.fail(Call::kWait, 1, CUDA_ERROR_LAUNCH_FAILED);
  const MoveOutcome outcome = move_on_stream({base});
  EXPECT_EQ(outcome.result, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(outcome.to_device, 0u);
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.leaked_granules, 2u) << "the new granules, which a copy may still write";
  EXPECT_EQ(stats.pooled_device_granules, 0u) << "and not handed out again";
  expect_tags(base, 2);
}

TEST_F(GranuleStreamMoveTest, BlocksWhoseUsesAreNotAllNamedMoveInTheWindow) {
  const CUdeviceptr base = tagged_block(2, 0);
  queued_.uses_named = false;
  const MoveOutcome outcome = move_on_stream({base});
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(outcome.on_stream, 0u) << "no submission could be made to wait for the copy";
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  expect_tags(base, 2);
}

TEST_F(GranuleStreamMoveTest, AfterAStageTheNextMoveOnTheStreamWaitsForTheArenasStream) {
  const CUdeviceptr ahead = tagged_block(1, 0);
  const CUdeviceptr needed = tagged_block(1, 0);
  const CUdeviceptr another = tagged_block(1, 0);
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove stage{.base = ahead, .to = kDevice, .granules = 0};
    ASSERT_EQ(arena_.stage(std::span(&stage, 1), exclusive, queued_).to_device, 1u);
  }
  // The stage took the stream bits of the work that may touch every block; only the arena's
  // stream waits for that work, and `needed` must not be remapped before it is over.
  EXPECT_EQ(move_on_stream({needed}).on_stream, 1u);
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  move_on_stream({another});
  EXPECT_EQ(ops_.calls(Call::kWait), 1) << "once is enough, until the next stage";
}

// The same holds for a move in the window: it remaps while its own copies run, but not before
// the arena's stream is past the work the stage took.
TEST_F(GranuleStreamMoveTest, AfterAStageAMoveInTheWindowWaitsForTheArenasStreamBeforeItRemaps) {
  const CUdeviceptr ahead = tagged_block(1, 0);
  const CUdeviceptr needed = tagged_block(1, 0);
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove stage{.base = ahead, .to = kDevice, .granules = 0};
    ASSERT_EQ(arena_.stage(std::span(&stage, 1), exclusive, queued_).to_device, 1u);
  }
  const std::size_t before = ops_.sequence().size();
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove promotion{.base = needed, .to = kDevice, .granules = 0};
    ASSERT_EQ(arena_.move(std::span(&promotion, 1), exclusive, &queued_).to_device, 1u);
  }
  const std::vector<Call>& calls = ops_.sequence();
  const auto first_unmap = std::find(calls.begin() + static_cast<std::ptrdiff_t>(before),
                                     calls.end(), Call::kUnmap);
  ASSERT_NE(first_unmap, calls.end());
  EXPECT_NE(std::find(calls.begin() + static_cast<std::ptrdiff_t>(before), first_unmap,
                      Call::kWait),
            first_unmap)
      << "the arena's stream is waited for before the remap";
  expect_tags(needed, 1);
}

TEST_F(GranuleStreamMoveTest, TheOpsAreToldOfACaptureInProgress) {
  const CUdeviceptr base = tagged_block(1, 0);
  move_on_stream({base});
  const std::array<uint64_t, 1> touched{base};
  const core::RemapWindow::Submission submission = window_.enter();
  EXPECT_EQ(arena_.order_after_copies(kStream, touched, false, true), CUDA_SUCCESS);
  ASSERT_EQ(ops_.stream_orders().size(), 1u);
  EXPECT_TRUE(ops_.stream_orders().front().capturing);
}

TEST_F(GranuleStreamMoveTest, AnOrderThatFailsIsReported) {
  const CUdeviceptr base = tagged_block(1, 0);
  move_on_stream({base});
  ops_.fail(Call::kOrderStream, 1, CUDA_ERROR_INVALID_CONTEXT);
  const std::array<uint64_t, 1> touched{base};
  const core::RemapWindow::Submission submission = window_.enter();
  EXPECT_EQ(arena_.order_after_copies(kStream, touched, false, false), CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace
}  // namespace vramspill::tiers
