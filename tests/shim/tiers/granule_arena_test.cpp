// tiers/granule_arena: blocks of whole granules, device share first, pooled and reused granules
// (no fragmentation by construction), trim, all-or-nothing allocation under every driver
// failure, and books that always add up (Note [The granule arena]).
#include "tiers/granule_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arena_test_fixtures.h"
#include "core/remap_window.h"

namespace vramspill::tiers {

// For the random tests' names and messages, which would otherwise print the struct's padding.
void PrintTo(const ChunkSizes& sizes, std::ostream* out) {
  *out << "chunks of " << sizes.chunk_granules << " from " << sizes.chunked_block_granules;
}

namespace {

TEST_F(GranuleArenaTest, ABlockIsWholeGranulesWithItsDeviceShareFirst) {
  const CUdeviceptr base = allocate(5 * kMiB, 2);
  EXPECT_EQ(base % kGranuleBytes, 0u);
  EXPECT_EQ(ops_.mapped_kind(base), GranuleKind::kDevice);
  EXPECT_EQ(ops_.mapped_kind(base + kGranuleBytes), GranuleKind::kDevice);
  EXPECT_EQ(ops_.mapped_kind(base + 2 * kGranuleBytes), GranuleKind::kHost);
  EXPECT_EQ(ops_.mappings(), 3u);
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(stats.device_granules, 2u);
  EXPECT_EQ(stats.host_granules, 1u);
  const ArenaBlock block = *arena_.block_containing(base);
  EXPECT_EQ(block.bytes, 5 * kMiB);
  EXPECT_EQ(block.range_bytes(), 6 * kMiB) << "rounding to granules is the block's to pay";
}

TEST_F(GranuleArenaTest, FreedGranulesBackTheNextBlockWithoutTheDriver) {
  const CUdeviceptr first = allocate(8 * kMiB, 4);
  const int created = ops_.calls(Call::kCreate);
  const std::optional<ArenaBlock> freed = arena_.free(first);
  ASSERT_TRUE(freed);
  EXPECT_EQ(freed->device_granules, 4u);
  EXPECT_EQ(ops_.mappings(), 0u);
  EXPECT_EQ(ops_.reservations(), 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 4u);
  allocate(8 * kMiB, 4);
  EXPECT_EQ(ops_.calls(Call::kCreate), created);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 0u);
}

TEST_F(GranuleArenaTest, AnyFreeGranuleBacksAnyBlock) {
  // Ten one-granule blocks, every other one freed: the five scattered granules back one block
  // of five, where a contiguous allocator would have no five-granule hole.
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(allocate(kGranuleBytes, 1));
  for (int i = 0; i < 10; i += 2) ASSERT_TRUE(arena_.free(blocks[i]));
  const int created = ops_.calls(Call::kCreate);
  allocate(5 * kGranuleBytes, 5);
  EXPECT_EQ(ops_.calls(Call::kCreate), created);
  EXPECT_EQ(ops_.live_handles(), 10u);
}

TEST_F(GranuleArenaTest, TrimKeepsOnlyTheKeepSizes) {
  const CUdeviceptr a = allocate(10 * kGranuleBytes, 6);
  arena_.free(a);
  EXPECT_EQ(ops_.live_handles(), 10u);
  arena_.trim();
  EXPECT_EQ(ops_.live_handles(GranuleKind::kDevice), 2u);
  EXPECT_EQ(ops_.live_handles(GranuleKind::kHost), 1u);
  EXPECT_EQ(arena_.stats().released_granules, 7u);
}

TEST_F(GranuleArenaTest, AFailedCreateLeavesNothingBehind) {
  ops_.fail(Call::kCreate, 3);
  CUdeviceptr base = 0;
  EXPECT_EQ(arena_.allocate(4 * kGranuleBytes, 4, &base), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(base, 0u);
  EXPECT_EQ(ops_.mappings(), 0u);
  EXPECT_EQ(ops_.reservations(), 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u) << "what was made is kept for later";
  allocate(4 * kGranuleBytes, 4);
}

TEST_F(GranuleArenaTest, AFailedMapLeavesNothingBehind) {
  ops_.fail(Call::kMap, 1, CUDA_ERROR_INVALID_VALUE);  // the block's run, all or nothing
  CUdeviceptr base = 0;
  EXPECT_EQ(arena_.allocate(4 * kGranuleBytes, 2, &base), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops_.mappings(), 0u);
  EXPECT_EQ(ops_.reservations(), 0u);
  EXPECT_EQ(arena_.stats().blocks, 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules + arena_.stats().pooled_host_granules, 4u);
}

TEST_F(GranuleArenaTest, AFailedReserveLeavesNothingBehind) {
  ops_.fail(Call::kReserve, 1);
  CUdeviceptr base = 0;
  EXPECT_EQ(arena_.allocate(3 * kGranuleBytes, 1, &base), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ops_.mappings(), 0u);
  EXPECT_EQ(arena_.stats().blocks, 0u);
}

TEST_F(GranuleArenaTest, GranulesTheDriverWillNotUnmapAreLeakedNeverReused) {
  const CUdeviceptr base = allocate(3 * kGranuleBytes, 3);
  // The block's one unmap fails, and so does the second of the three granule by granule.
  ops_.fail(Call::kUnmap, 1, CUDA_ERROR_UNKNOWN);
  ops_.fail(Call::kUnmap, 3, CUDA_ERROR_UNKNOWN);
  ASSERT_TRUE(arena_.free(base));
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.leaked_granules, 1u);
  EXPECT_EQ(stats.leaked_ranges, 1u) << "a range that still has a mapping cannot be given back";
  EXPECT_EQ(stats.pooled_device_granules, 2u);
  // Reusing the leaked granule would map it twice: the fake would report it.
  allocate(3 * kGranuleBytes, 3);
}

TEST_F(GranuleArenaTest, FindsTheBlockOfAnyAddressInItsRange) {
  const CUdeviceptr base = allocate(3 * kMiB, 2);  // two granules
  EXPECT_EQ(arena_.block_containing(base + 3 * kMiB + 17)->base, base) << "rounding included";
  EXPECT_FALSE(arena_.block_containing(base + 2 * kGranuleBytes));
  EXPECT_FALSE(arena_.block_containing(base - 1));
  EXPECT_FALSE(arena_.free(base + kGranuleBytes)) << "only a block's start frees it";
  EXPECT_TRUE(arena_.block_containing(base));
}

TEST_F(GranuleArenaTest, ABlockIsMappedAndUnmappedRunByRun) {
  const CUdeviceptr base = allocate(4 * kGranuleBytes, 2);
  EXPECT_EQ(ops_.calls(Call::kMap), 1);
  EXPECT_EQ(arena_.stats().vmm_calls, 4u + 1 + 4 + 1)
      << "a reserve, four creates, four maps and one access for the run";
  ASSERT_TRUE(arena_.free(base));
  EXPECT_EQ(ops_.calls(Call::kUnmap), 1);
  EXPECT_EQ(arena_.stats().homes, 0u) << "a granule that never moved has no home";
}

TEST_F(GranuleArenaTest, RefusesWhatIsNotABlock) {
  CUdeviceptr base = 0;
  EXPECT_EQ(arena_.allocate(kMiB, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(arena_.allocate(0, 0, &base), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(arena_.allocate(3 * kMiB, 3, &base), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(ops_.calls(Call::kReserve), 0);
}


TEST_F(GranuleMoveTest, AnEvictionMovesTheLastDeviceGranulesAndKeepsTheBytes) {
  const CUdeviceptr base = tagged_block(4, 4);
  const MoveOutcome outcome = move({{.base = base, .to = kHost, .granules = 2}});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_host, 2u);
  EXPECT_EQ(kinds(base, 4), (std::vector{kDevice, kDevice, kHost, kHost}));
  expect_tags(base, 4);
  EXPECT_EQ(ops_.calls(Call::kSynchronize), 1) << "the device's work is waited for first";
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "one copy per run of consecutive granules and homes";
  EXPECT_EQ(ops_.reservations(), 2u) << "the block's range and one of homes, no staging range";
  EXPECT_EQ(ops_.mappings(), 8u)
      << "the block's four granules and, at their homes, the two old and the two new ones";
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.device_granules, 2u);
  EXPECT_EQ(stats.host_granules, 2u);
  EXPECT_EQ(stats.pooled_device_granules, 2u) << "the old backing waits for the next block";
}

TEST_F(GranuleMoveTest, TheWindowRemapsWhileItsCopiesRun) {
  const CUdeviceptr base = tagged_block(4, 0);
  EXPECT_EQ(move({{.base = base, .to = kDevice, .granules = 0}}).to_device, 4u);
  EXPECT_EQ(ops_.unmaps_beside_copies(), 1) << "the block's run, unmapped under no copy";
  EXPECT_EQ(ops_.calls(Call::kWait), 1) << "then the copies are waited for, once";
  EXPECT_EQ(ops_.copies_in_flight(), 0u);
  expect_tags(base, 4);
}

TEST_F(GranuleMoveTest, ABatchCopiesEachWayOnItsLaneEvictionsFirstInAnEpochOfItsOwn) {
  const CUdeviceptr in = tagged_block(2, 0);
  const CUdeviceptr out = tagged_block(3, 3);
  ASSERT_LT(in, out) << "the slots are sorted by block: the promotion's come first";
  const MoveOutcome outcome =
      move({{.base = in, .to = kDevice, .granules = 0}, {.base = out, .to = kHost, .granules = 0}});
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(outcome.to_host, 3u);
  // Note [Two copy lanes]: the to-host lane need not wait for the promotions.
  EXPECT_EQ(ops_.copy_lanes(), (std::vector{CopyLane::kToHost, CopyLane::kToDevice}));
  const std::vector<Call>& calls = ops_.sequence();
  const auto first_copy = std::ranges::find(calls, Call::kCopy);
  EXPECT_EQ(std::count(calls.begin(), first_copy, Call::kBeginCopies), 1)
      << "an epoch of its own, begun before its first copy";
  EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  expect_tags(in, 2);
  expect_tags(out, 3);
}

// Note [Evictions ahead of promotions] (tiers/granule_mover.h): the promotion that takes the
// granules an eviction ahead gave up follows that eviction's runs, not an epoch of its own, and
// the safe window's device-wide wait is made once.
TEST_F(GranuleMoveTest, APromotionFollowsOnlyTheRunsOfTheEvictionsAheadWhoseGranulesItTakes) {
  const CUdeviceptr out = tagged_block(2, 2);
  const CUdeviceptr in = tagged_block(2, 0);
  MoveOutcome evicted;
  MoveOutcome promoted;
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    evicted = arena_.evict_ahead({{{.base = out, .to = kHost, .granules = 0}}}, exclusive);
    EXPECT_EQ(ops_.copies_in_flight(), 1u) << "left running";
    const std::size_t calls_before = ops_.sequence().size();
    const std::vector<GranuleMove> promotion = {{.base = in, .to = kDevice, .granules = 0}};
    promoted = arena_.move(promotion, exclusive);
    const std::vector<Call> follower(ops_.sequence().begin() + calls_before, ops_.sequence().end());
    EXPECT_EQ(std::ranges::count(follower, Call::kBeginCopies), 0) << "no epoch of its own";
    EXPECT_EQ(std::ranges::count(follower, Call::kFollow), 1) << "after the eviction's run";
    EXPECT_EQ(std::ranges::count(follower, Call::kSynchronize), 0) << "the device waited once";
    EXPECT_EQ(arena_.settle(exclusive), CUDA_SUCCESS);
  }
  EXPECT_EQ(evicted.to_host, 2u);
  EXPECT_EQ(promoted.to_device, 2u);
  EXPECT_EQ(ops_.copy_lanes(), (std::vector{CopyLane::kToHost, CopyLane::kToDevice}));
  EXPECT_EQ(arena_.stats().pooled_device_granules, 0u) << "the promotion took the evicted ones";
  EXPECT_EQ(ops_.copies_in_flight(), 0u) << "settled";
  EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  expect_tags(out, 2);
  expect_tags(in, 2);
}

// Settling the window ends what a batch ahead left: its copies, its marks, and the device-wide
// wait it made, which the next window's first move makes again.
TEST_F(GranuleMoveTest, SettlingAfterAnEvictionAheadLeavesNothingForTheNextWindow) {
  const CUdeviceptr out = tagged_block(2, 2);
  const CUdeviceptr in = tagged_block(2, 0);
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    EXPECT_EQ(arena_.evict_ahead({{{.base = out, .to = kHost, .granules = 0}}}, exclusive).to_host,
              2u);
    EXPECT_EQ(arena_.settle(exclusive), CUDA_SUCCESS);
  }
  EXPECT_EQ(ops_.copies_in_flight(), 0u);
  EXPECT_EQ(ops_.live_events(), 0u) << "the marks and the copies' event are given back";
  const std::size_t calls_before = ops_.sequence().size();
  EXPECT_EQ(move({{.base = in, .to = kDevice, .granules = 0}}).to_device, 2u);
  const std::vector<Call> next(ops_.sequence().begin() + calls_before, ops_.sequence().end());
  EXPECT_EQ(std::ranges::count(next, Call::kSynchronize), 1) << "a new window waits again";
  EXPECT_EQ(std::ranges::count(next, Call::kBeginCopies), 1) << "in an epoch of its own";
  EXPECT_EQ(std::ranges::count(next, Call::kFollow), 0);
  EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  expect_tags(out, 2);
  expect_tags(in, 2);
}

TEST_F(GranuleMoveTest, APromotionBringsTheHostGranulesInFirstToLast) {
  const CUdeviceptr base = tagged_block(5, 1);
  const MoveOutcome outcome = move({{.base = base, .to = kDevice, .granules = 3}});
  EXPECT_EQ(outcome.to_device, 3u);
  EXPECT_EQ(kinds(base, 5), (std::vector{kDevice, kDevice, kDevice, kDevice, kHost}));
  expect_tags(base, 5);
  EXPECT_EQ(move({{.base = base, .to = kDevice, .granules = 0}}).to_device, 1u) << "0: all";
  expect_tags(base, 5);
}

TEST_F(GranuleMoveTest, EachBlockIsItsOwnRemapRunAndHomesThatFollowEachOtherOneCopy) {
  const CUdeviceptr a = tagged_block(2, 0);
  const CUdeviceptr b = tagged_block(3, 0);
  const MoveOutcome outcome =
      move({{.base = b, .to = kDevice, .granules = 0}, {.base = a, .to = kDevice, .granules = 0}});
  EXPECT_EQ(outcome.to_device, 5u);
  EXPECT_EQ(ops_.calls(Call::kUnmap), 2);
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "the homes were made in one go, in order";
  expect_tags(a, 2);
  expect_tags(b, 3);
}

TEST_F(GranuleMoveTest, AFailedCopyMovesNothing) {
  const CUdeviceptr base = tagged_block(3, 3);
  ops_.fail(Call::kCopy, 1, CUDA_ERROR_LAUNCH_FAILED);
  const MoveOutcome outcome = move({{.base = base, .to = kHost, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(outcome.to_host, 0u);
  EXPECT_EQ(kinds(base, 3), (std::vector{kDevice, kDevice, kDevice}));
  expect_tags(base, 3);
  EXPECT_EQ(ops_.reservations(), 2u) << "the block's and the homes'";
  EXPECT_EQ(arena_.stats().pooled_host_granules, 3u) << "with their homes, for the next move";
}

TEST_F(GranuleMoveTest, AFailedRemapStopsTheBatchWithTheRunAsItWas) {
  const CUdeviceptr a = tagged_block(2, 0);
  const CUdeviceptr b = tagged_block(3, 0);
  // Ten homes (the new granules' and the old ones'), then a's run remaps and b's fails.
  ops_.fail(Call::kMap, 12, CUDA_ERROR_UNKNOWN);
  const MoveOutcome outcome =
      move({{.base = a, .to = kDevice, .granules = 0}, {.base = b, .to = kDevice, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(kinds(a, 2), (std::vector{kDevice, kDevice}));
  EXPECT_EQ(kinds(b, 3), (std::vector{kHost, kHost, kHost}));
  expect_tags(a, 2);
  expect_tags(b, 3);
  EXPECT_EQ(arena_.stats().unbacked_granules, 0u);
}

TEST_F(GranuleMoveTest, ARunTheDriverWillNotUnmapWholeIsRemappedGranuleByGranule) {
  const CUdeviceptr base = tagged_block(3, 0);
  ops_.fail(Call::kUnmap, 1, CUDA_ERROR_INVALID_VALUE);
  const MoveOutcome outcome = move({{.base = base, .to = kDevice, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_device, 3u);
  EXPECT_EQ(kinds(base, 3), (std::vector{kDevice, kDevice, kDevice}));
  expect_tags(base, 3);
  EXPECT_EQ(ops_.calls(Call::kUnmap), 4) << "the run's, then one a granule";
}

TEST_F(GranuleMoveTest, AMoveCostsThreeVmmCallsAGranuleAndTwoOfThemARun) {
  const CUdeviceptr base = tagged_block(8, 8);
  // The first moves give the granules homes; then the same physical granules go back and forth.
  move({{.base = base, .to = kHost, .granules = 0}});
  move({{.base = base, .to = kDevice, .granules = 0}});
  const uint64_t before = arena_.stats().move_vmm_calls;
  const MoveOutcome outcome = move({{.base = base, .to = kHost, .granules = 0}});
  EXPECT_EQ(outcome.to_host, 8u);
  EXPECT_EQ(arena_.stats().move_vmm_calls - before, 1u + 8 + 1)
      << "one unmap, a map a granule and one access, for the run of eight";
  EXPECT_EQ(arena_.stats().homes, 16u) << "each physical granule keeps its home";
  EXPECT_EQ(ops_.calls(Call::kReserve), 2) << "the block's range and one range of homes";
  expect_tags(base, 8);
}

TEST_F(GranuleMoveTest, TrimKeepsWhatMovesJustTookThenOnlyTheKeepSizes) {
  const CUdeviceptr base = tagged_block(8, 8);
  move({{.base = base, .to = kHost, .granules = 0}});
  move({{.base = base, .to = kDevice, .granules = 0}});
  arena_.trim();
  EXPECT_EQ(arena_.stats().pooled_host_granules, 8u) << "the next eviction takes them again";
  const int created = ops_.calls(Call::kCreate);
  move({{.base = base, .to = kHost, .granules = 0}});
  EXPECT_EQ(ops_.calls(Call::kCreate), created) << "no granule made again, no home either";
  expect_tags(base, 8);
  for (int i = 0; i < 16; ++i) arena_.trim();
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u) << "the keep size, once moves stop";
}

TEST_F(GranuleMoveTest, AMixedBatchTheDriverShortensGivesEachSlotItsOwnKind) {
  const CUdeviceptr out = tagged_block(2, 2);
  const CUdeviceptr in = tagged_block(2, 0);
  ASSERT_TRUE(arena_.free(tagged_block(1, 0)));  // one host granule in the pool
  ops_.fail(Call::kCreate, 2);  // one device granule, then out of memory
  const MoveOutcome outcome = move(
      {{.base = out, .to = kHost, .granules = 0}, {.base = in, .to = kDevice, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(outcome.to_device, 1u);
  EXPECT_EQ(outcome.to_host, 1u) << "the pooled host granule; never the new device one";
  EXPECT_EQ(std::ranges::count(kinds(out, 2), kHost), 1) << "the one granule evicted";
  EXPECT_EQ(kinds(in, 2), (std::vector{kDevice, kHost}));
  expect_tags(out, 2);
  expect_tags(in, 2);
}

TEST_F(GranuleMoveTest, WhatTheDriverCannotGiveShrinksTheBatch) {
  const CUdeviceptr base = tagged_block(4, 0);
  ops_.fail(Call::kCreate, 3);  // two device granules, then out of memory
  const MoveOutcome outcome = move({{.base = base, .to = kDevice, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(kinds(base, 4), (std::vector{kDevice, kDevice, kHost, kHost}));
  expect_tags(base, 4);
}

TEST_F(GranuleMoveTest, MovesOfBlocksThatAreGoneAreSkipped) {
  const CUdeviceptr base = tagged_block(2, 2);
  ASSERT_TRUE(arena_.free(base));
  const MoveOutcome outcome = move({{.base = base, .to = kHost, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_host, 0u);
  EXPECT_EQ(ops_.calls(Call::kSynchronize), 0) << "an empty batch waits for nothing";
}

class GranuleStageTest : public GranuleMoveTest {
 protected:
  MoveOutcome stage(CUdeviceptr base) {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove promotion{.base = base, .to = kDevice, .granules = 0};
    return arena_.stage(std::span(&promotion, 1), exclusive, queued_);
  }
  MoveOutcome move_with_queued(const GranuleMove& moving) {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    return arena_.move(std::span(&moving, 1), exclusive, &queued_);
  }
  MoveOutcome finish(CUdeviceptr base) {
    return move_with_queued({.base = base, .to = kDevice, .granules = 0});
  }

  FakeQueuedWork queued_;
};

TEST_F(GranuleStageTest, AStageCopiesWithoutWaitingAndTheFinishRemaps) {
  const CUdeviceptr base = tagged_block(3, 0);
  const MoveOutcome staged = stage(base);
  EXPECT_EQ(staged.result, CUDA_SUCCESS);
  EXPECT_EQ(staged.to_device, 3u);
  EXPECT_EQ(queued_.orders, 1) << "the copy is ordered after the block's queued work";
  EXPECT_EQ(ops_.calls(Call::kWait), 0) << "nothing waits for the copy";
  EXPECT_EQ(ops_.calls(Call::kSynchronize), 0);
  EXPECT_EQ(ops_.copies_in_flight(), 1u);
  EXPECT_EQ(kinds(base, 3), (std::vector{kHost, kHost, kHost})) << "its address is not remapped";
  const ArenaBlock block = *arena_.block_containing(base);
  EXPECT_EQ(block.device_granules, 3u) << "the books count it on the device at once";
  EXPECT_EQ(block.staged_granules, 3u);
  EXPECT_EQ(arena_.stats().staged_host_granules, 3u);
  EXPECT_EQ(stage(base).to_device, 0u) << "a staged block is not staged again";

  const MoveOutcome finished = finish(base);
  EXPECT_EQ(finished.result, CUDA_SUCCESS);
  EXPECT_EQ(finished.to_device + finished.to_host, 0u) << "counted at the stage";
  EXPECT_EQ(queued_.waits, 1);
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "no work touched it since: the copy stands";
  EXPECT_EQ(kinds(base, 3), (std::vector{kDevice, kDevice, kDevice}));
  expect_tags(base, 3);
  EXPECT_EQ(arena_.block_containing(base)->staged_granules, 0u);
  EXPECT_EQ(ops_.reservations(), 2u) << "the block's range and the homes', no staging range";
  EXPECT_EQ(arena_.stats().pooled_host_granules, 3u);
}

TEST_F(GranuleStageTest, WorkQueuedOnAStagedBlockIsCopiedAgain) {
  const CUdeviceptr base = tagged_block(2, 0);
  stage(base);
  ops_.write(base, 0x5eed);  // a kernel wrote the host granule in place after the copy
  queued_.work_found = true;
  EXPECT_EQ(finish(base).result, CUDA_SUCCESS);
  EXPECT_EQ(ops_.calls(Call::kCopy), 2);
  EXPECT_EQ(ops_.read(base), 0x5eedu);
  EXPECT_EQ(ops_.read(base + kGranuleBytes), base + 1);
}

TEST_F(GranuleStageTest, EvictingAStagedBlockCopiesNothing) {
  const CUdeviceptr base = tagged_block(2, 0);
  stage(base);
  const MoveOutcome evicted = move_with_queued({.base = base, .to = kHost, .granules = 0});
  EXPECT_EQ(evicted.to_host, 2u);
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "the old granules never left its address";
  EXPECT_EQ(kinds(base, 2), (std::vector{kHost, kHost}));
  expect_tags(base, 2);
  EXPECT_EQ(arena_.block_containing(base)->device_granules, 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u);
  EXPECT_EQ(ops_.reservations(), 2u);
}

TEST_F(GranuleStageTest, FreeingAStagedBlockGivesEverythingBack) {
  const CUdeviceptr base = tagged_block(2, 0);
  stage(base);
  ASSERT_TRUE(arena_.free(base));
  EXPECT_EQ(ops_.mappings(), 2u) << "the staged granules' homes, pooled with them";
  EXPECT_EQ(ops_.reservations(), 1u) << "the homes'";
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.pooled_device_granules, 2u);
  EXPECT_EQ(stats.pooled_host_granules, 2u);
  EXPECT_EQ(stats.staged_host_granules, 0u);
}

// The staged copy reads the block's address: when it cannot be waited for, freeing the block
// leaves its range and its granules to the driver rather than unmapping or pooling them under
// the copy.
TEST_F(GranuleStageTest, FreeingAStagedBlockWhoseCopyCannotBeWaitedForGivesNothingBack) {
  const CUdeviceptr base = tagged_block(2, 0);
  stage(base);
  const std::size_t reservations = ops_.reservations();
  ops_.fail(Call::kWait, 1, CUDA_ERROR_LAUNCH_FAILED);
  ASSERT_TRUE(arena_.free(base));
  EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.leaked_ranges, 1u);
  EXPECT_EQ(stats.pooled_host_granules, 0u) << "a granule the copy reads went to the pool";
  EXPECT_EQ(ops_.reservations(), reservations) << "the block's range was given back";
}

TEST_F(GranuleStageTest, AStageThatCannotBeOrderedMovesNothing) {
  const CUdeviceptr base = tagged_block(2, 0);
  queued_.order_result = CUDA_ERROR_UNKNOWN;
  const MoveOutcome staged = stage(base);
  EXPECT_EQ(staged.result, CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(staged.to_device, 0u);
  EXPECT_EQ(ops_.calls(Call::kCopy), 0);
  EXPECT_EQ(arena_.block_containing(base)->device_granules, 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u) << "what it took waits in the pool";
}

TEST_F(GranuleStageTest, AFailedStagingCopyLeavesTheBlockAsItWas) {
  const CUdeviceptr base = tagged_block(2, 0);
  ops_.fail(Call::kCopy, 1, CUDA_ERROR_LAUNCH_FAILED);
  const MoveOutcome staged = stage(base);
  EXPECT_EQ(staged.result, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(staged.to_device, 0u);
  EXPECT_EQ(arena_.block_containing(base)->device_granules, 0u);
  EXPECT_EQ(arena_.stats().pooled_device_granules, 2u);
  EXPECT_EQ(ops_.reservations(), 2u);
  expect_tags(base, 2);
}

TEST_F(GranuleStageTest, AFinishThatCannotWaitForTheCopyGivesTheStageUp) {
  const CUdeviceptr base = tagged_block(2, 0);
  stage(base);
  ops_.fail(Call::kWait, 1, CUDA_ERROR_LAUNCH_FAILED);
  const MoveOutcome finished = finish(base);
  EXPECT_EQ(finished.result, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(finished.to_host, 2u) << "the staged granules given up, as an eviction";
  EXPECT_EQ(finished.to_device, 2u) << "then promoted as any block on the host is";
  EXPECT_EQ(ops_.calls(Call::kCopy), 2);
  EXPECT_EQ(kinds(base, 2), (std::vector{kDevice, kDevice}));
  expect_tags(base, 2);
}

TEST(GranuleArenaLifetime, GivesEverythingBackWhenDestroyed) {
  FakeGranuleOps ops;
  {
    GranuleArena arena{ops, ArenaOptions{.keep_device_granules = 8, .keep_host_granules = 8}};
    CUdeviceptr a = 0;
    CUdeviceptr b = 0;
    ASSERT_EQ(arena.allocate(5 * kMiB, 1, &a), CUDA_SUCCESS);
    ASSERT_EQ(arena.allocate(9 * kMiB, 5, &b), CUDA_SUCCESS);
    arena.free(a);
    CUdeviceptr staged = 0;  // Note [Staged promotions]: its new granules and their homes go too
    ASSERT_EQ(arena.allocate(4 * kMiB, 0, &staged), CUDA_SUCCESS);
    core::RemapWindow window;
    FakeQueuedWork queued;
    const GranuleMove promotion{.base = staged, .to = GranuleKind::kDevice, .granules = 0};
    ASSERT_EQ(arena.stage(std::span(&promotion, 1), window.close(), queued).to_device, 2u);
    // Note [Moves copied on the stream]: so do a copy's range and event.
    CUdeviceptr arriving = 0;
    ASSERT_EQ(arena.allocate(4 * kMiB, 0, &arriving), CUDA_SUCCESS);
    const GranuleMove arrival{.base = arriving, .to = GranuleKind::kDevice, .granules = 0};
    ASSERT_EQ(arena.move_on_stream(std::span(&arrival, 1), window.close(), queued).on_stream, 2u);
  }
  EXPECT_EQ(ops.live_handles(), 0u);
  EXPECT_EQ(ops.mappings(), 0u);
  EXPECT_EQ(ops.reservations(), 0u);
  EXPECT_EQ(ops.live_events(), 0u);
  EXPECT_TRUE(ops.misuse().empty()) << ops.misuse().front();
}

// Random allocations and frees with random driver failures: after every step the books add up
// and the driver's rules hold; at the end, everything goes back.
// Each random test runs with the default chunks (which no block here is large enough for), and
// with small chunks that back most blocks (Note [Chunks] in tiers/granule_chunks.h).
class GranuleArenaRandom : public ::testing::TestWithParam<ChunkSizes> {
 protected:
  ArenaOptions options() const {
    return {.keep_device_granules = 4, .keep_host_granules = 4, .chunks = GetParam()};
  }
};
INSTANTIATE_TEST_SUITE_P(Chunks, GranuleArenaRandom,
                         ::testing::Values(ChunkSizes{}, ChunkSizes{2, 4}, ChunkSizes{3, 3}),
                         [](const ::testing::TestParamInfo<ChunkSizes>& chunks) {
                           return "chunk" + std::to_string(chunks.param.chunk_granules) + "from" +
                                  std::to_string(chunks.param.chunked_block_granules);
                         });

TEST_P(GranuleArenaRandom, BooksAddUpUnderRandomFailures) {
  FakeGranuleOps ops;
  GranuleArena arena{ops, options()};
  std::mt19937 random(20261202);
  std::vector<CUdeviceptr> live;
  for (int step = 0; step < 3000; ++step) {
    ops.heal();
    if (random() % 5 == 0) {
      const auto call = static_cast<Call>(random() % FakeGranuleOps::kCallCount);
      ops.fail(call, static_cast<int>(random() % 4) + 1, CUDA_ERROR_UNKNOWN);
    }
    const uint32_t action = random() % 10;
    if (action < 5 || live.empty()) {
      const uint64_t bytes = (random() % (12 * kMiB)) + 1;
      const uint64_t granules = GranuleArena::granules_for(bytes);
      CUdeviceptr base = 0;
      if (arena.allocate(bytes, random() % (granules + 1), &base) == CUDA_SUCCESS)
        live.push_back(base);
    } else if (action < 9) {
      const std::size_t index = random() % live.size();
      ASSERT_TRUE(arena.free(live[index]));
      live.erase(live.begin() + static_cast<long>(index));
    } else {
      arena.trim();
    }
    std::string problem;
    ASSERT_TRUE(arena.check_invariants(&problem)) << "step " << step << ": " << problem;
    ASSERT_TRUE(ops.misuse().empty()) << "step " << step << ": " << ops.misuse().front();
  }
  ops.heal();
  for (const CUdeviceptr base : live) arena.free(base);
  const ArenaStats stats = arena.stats();
  EXPECT_GT(stats.leaked_granules, 0u) << "the failures did not reach the leak paths";
  // What stays with the driver is exactly what the arena says it leaked.
  EXPECT_LE(ops.mappings(), stats.leaked_granules);
  EXPECT_EQ(ops.reservations(), stats.leaked_ranges);
  EXPECT_EQ(ops.live_granules(),
            stats.pooled_device_granules + stats.pooled_host_granules + stats.leaked_granules);
}

// Random moves both ways under random driver failures: every granule keeps its bytes, and the
// books add up after each batch.
TEST_P(GranuleArenaRandom, MovesKeepEveryByteUnderRandomFailures) {
  FakeGranuleOps ops;
  GranuleArena arena{ops, options()};
  core::RemapWindow window;
  FakeQueuedWork queued;
  std::mt19937 random(7);
  std::vector<std::pair<CUdeviceptr, uint64_t>> blocks;  // base, granules
  for (int i = 0; i < 12; ++i) {
    const uint64_t granules = random() % 6 + 1;
    CUdeviceptr base = 0;
    ASSERT_EQ(arena.allocate(granules * kGranuleBytes, random() % (granules + 1), &base),
              CUDA_SUCCESS);
    for (uint64_t g = 0; g < granules; ++g) ops.write(base + g * kGranuleBytes, base + g);
    blocks.emplace_back(base, granules);
  }
  uint64_t moved = 0;
  for (int batch = 0; batch < 400; ++batch) {
    ops.heal();
    if (random() % 3 == 0) {
      const auto call = static_cast<Call>(random() % FakeGranuleOps::kCallCount);
      ops.fail(call, static_cast<int>(random() % 6) + 1, CUDA_ERROR_UNKNOWN);
    }
    std::vector<GranuleMove> moves;
    for (int m = 0; m < 3; ++m) {
      const auto& [base, granules] = blocks[random() % blocks.size()];
      moves.push_back({.base = base,
                       .to = random() % 2 == 0 ? GranuleKind::kDevice : GranuleKind::kHost,
                       .granules = random() % (granules + 1)});
    }
    // A quarter of the batches stage their promotions (Note [Staged promotions]), and a quarter
    // are copied on the stream (Note [Moves copied on the stream]), whose copies end now and
    // then; the moves that name staged blocks settle them first.
    MoveOutcome outcome;
    {
      const core::RemapWindow::Exclusive exclusive = window.close();
      switch (random() % 4) {
        case 0:
          outcome = arena.stage(moves, exclusive, queued);
          break;
        case 1:
          outcome = arena.move_on_stream(moves, exclusive, queued);
          break;
        default:
          outcome = arena.move(moves, exclusive);
      }
    }
    if (random() % 3 == 0) ops.finish_copies();
    moved += outcome.to_device + outcome.to_host;
    ASSERT_EQ(arena.stats().unbacked_granules, 0u) << "batch " << batch;
    for (const auto& [base, granules] : blocks) {
      for (uint64_t g = 0; g < granules; ++g)
        ASSERT_EQ(ops.read(base + g * kGranuleBytes), base + g) << "batch " << batch;
    }
    std::string problem;
    ASSERT_TRUE(arena.check_invariants(&problem)) << "batch " << batch << ": " << problem;
    ASSERT_TRUE(ops.misuse().empty()) << "batch " << batch << ": " << ops.misuse().front();
  }
  EXPECT_GT(moved, 100u);
}

// Submissions on other threads read the mover's copies in flight (order_after_copies(), inside
// the window) while the moving thread adds and retires them (Note [Moves copied on the stream]):
// every byte survives, the books add up, and ThreadSanitizer sees the mover's lock hold.
TEST(GranuleArenaThreads, SubmissionsWaitForCopiesWhileBlocksMoveOnTheStream) {
  FakeGranuleOps ops;
  GranuleArena arena{ops, ArenaOptions{.keep_device_granules = 4, .keep_host_granules = 4}};
  core::RemapWindow window;
  FakeQueuedWork queued;  // the moving thread's alone
  std::vector<CUdeviceptr> blocks(8);
  for (CUdeviceptr& base : blocks) {
    ASSERT_EQ(arena.allocate(2 * kGranuleBytes, 1, &base), CUDA_SUCCESS);
    for (uint64_t g = 0; g < 2; ++g) ops.write(base + g * kGranuleBytes, base + g);
  }
  std::atomic<bool> moving{true};
  std::atomic<int> started{0};
  std::vector<std::thread> submitters;
  for (uint32_t t = 0; t < 3; ++t) {
    submitters.emplace_back([&, t] {
      std::mt19937 random(t);
      started.fetch_add(1);
      // Until the moves are over (a bound keeps the fake's record of waits small).
      for (int i = 0; i < 100000 && moving.load(); ++i) {
        const uint64_t base = blocks[random() % blocks.size()];
        const core::RemapWindow::Submission entered = window.enter();
        EXPECT_EQ(arena.order_after_copies(0x100 + t, std::span(&base, 1), random() % 4 == 0,
                                           false),
                  CUDA_SUCCESS);
      }
    });
  }
  while (started.load() < 3) std::this_thread::yield();  // the moves meet the submissions
  std::mt19937 random(99);
  uint64_t streamed = 0;
  for (int round = 0; round < 300; ++round) {
    const GranuleMove move{.base = blocks[random() % blocks.size()],
                           .to = random() % 2 == 0 ? GranuleKind::kDevice : GranuleKind::kHost,
                           .granules = 0};
    {
      const core::RemapWindow::Exclusive closed = window.close();
      const MoveOutcome outcome = arena.move_on_stream(std::span(&move, 1), closed, queued);
      EXPECT_EQ(outcome.result, CUDA_SUCCESS);
      streamed += outcome.on_stream;
    }
    if (round % 7 == 0) ops.finish_copies();
    if (round % 11 == 0) arena.trim();
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // room for the submissions
  }
  moving = false;
  for (std::thread& thread : submitters) thread.join();
  ops.finish_copies();
  {
    const core::RemapWindow::Exclusive closed = window.close();
    arena.move({}, closed);  // retires what is done
  }
  for (const CUdeviceptr base : blocks) {
    for (uint64_t g = 0; g < 2; ++g) EXPECT_EQ(ops.read(base + g * kGranuleBytes), base + g);
  }
  std::string problem;
  EXPECT_TRUE(arena.check_invariants(&problem)) << problem;
  EXPECT_TRUE(ops.misuse().empty()) << ops.misuse().front();
  EXPECT_EQ(ops.live_events(), 0u);
  EXPECT_GT(streamed, 100u) << "granules copied while submissions went on";
}

TEST(GranuleArenaThreads, ManyThreadsAllocateAndFreeAtOnce) {
  FakeGranuleOps ops;
  GranuleArena arena{ops, ArenaOptions{.keep_device_granules = 16, .keep_host_granules = 16}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&arena, t] {
      std::mt19937 random(static_cast<uint32_t>(t));
      std::vector<CUdeviceptr> mine;
      for (int i = 0; i < 500; ++i) {
        CUdeviceptr base = 0;
        if (mine.size() < 8 && arena.allocate((random() % 4 + 1) * kGranuleBytes, random() % 2,
                                              &base) == CUDA_SUCCESS) {
          mine.push_back(base);
        } else if (!mine.empty()) {
          arena.free(mine.back());
          mine.pop_back();
        }
        if (i % 50 == 0) arena.trim();
      }
      for (const CUdeviceptr base : mine) arena.free(base);
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::string problem;
  EXPECT_TRUE(arena.check_invariants(&problem)) << problem;
  EXPECT_TRUE(ops.misuse().empty()) << ops.misuse().front();
  EXPECT_EQ(arena.stats().blocks, 0u);
  EXPECT_EQ(ops.mappings(), 0u);
}

}  // namespace
}  // namespace vramspill::tiers
