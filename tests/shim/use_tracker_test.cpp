// core::UseTracker: which tracked ranges a submission touches, and each block's last use
// (Note [Use lookups take no lock], Note [Retiring a snapshot], Note [Sequence numbers and last
// uses] in shim/core/use_tracker.h).
#include "core/use_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace vramspill::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = uint64_t{0x7f00} << 32;

std::vector<BlockId> blocks_of(const SubmissionUse& use) {
  return {use.blocks.begin(), use.blocks.begin() + use.count};
}

TEST(UseTracker, NothingTrackedIsIdleAndTouchesNothing) {
  UseTracker tracker;
  EXPECT_TRUE(tracker.idle());
  SubmissionUse use;
  const uint64_t words[] = {kBase, 42};
  tracker.record_words(1, words, use);
  EXPECT_EQ(use.sequence, 0u);
  EXPECT_EQ(use.count, 0u);
  EXPECT_FALSE(use.everything);
}

TEST(UseTracker, InteriorPointersCountAndEndsDoNot) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 3 * kMiB, 7), TrackResult::kTracked);
  EXPECT_FALSE(tracker.idle());
  SubmissionUse use;
  for (const uint64_t inside : {kBase, kBase + 1, kBase + 2 * kMiB + 12345, kBase + 3 * kMiB - 1}) {
    const uint64_t words[] = {inside};
    tracker.record_words(0, words, use);
    EXPECT_EQ(blocks_of(use), std::vector<BlockId>{7}) << std::hex << inside;
  }
  for (const uint64_t outside : {kBase - 1, kBase + 3 * kMiB, uint64_t{0}, ~uint64_t{0}}) {
    const uint64_t words[] = {outside};
    tracker.record_words(0, words, use);
    EXPECT_EQ(use.count, 0u) << std::hex << outside;
    EXPECT_EQ(use.sequence, 0u);
  }
}

TEST(UseTracker, AdjacentRangesInOneChunkAreToldApart) {
  UseTracker tracker;
  // Not chunk-aligned, so one chunk holds the end of the first range and the start of the next.
  const uint64_t first = kBase + kMiB / 2;
  ASSERT_EQ(tracker.track(first, kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(first + kMiB, 2 * kMiB, 2), TrackResult::kTracked);
  SubmissionUse use;
  const uint64_t words[] = {first + kMiB - 8, first + kMiB, first + kMiB - 8};
  tracker.record_words(0, words, use);
  EXPECT_EQ(blocks_of(use), (std::vector<BlockId>{1, 2}));  // distinct, in order first touched
}

TEST(UseTracker, RefusesSmallOverlappingAndReusedBlocks) {
  UseTracker tracker;
  EXPECT_EQ(tracker.track(kBase, kMiB - 1, 1), TrackResult::kTooSmall);
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  EXPECT_EQ(tracker.track(kBase + kMiB, 2 * kMiB, 2), TrackResult::kOverlaps);
  EXPECT_EQ(tracker.track(kBase - kMiB, kMiB + 1, 2), TrackResult::kOverlaps);
  EXPECT_EQ(tracker.track(~uint64_t{0} - kMiB, 2 * kMiB, 2), TrackResult::kOverlaps);
  EXPECT_EQ(tracker.track(kBase + 4 * kMiB, kMiB, 1), TrackResult::kBlockInUse);
  EXPECT_EQ(tracker.track(kBase - kMiB, kMiB, 2), TrackResult::kTracked);  // touching is fine
  EXPECT_EQ(tracker.tracked(), 2u);
}

TEST(UseTracker, UntrackForgetsTheRange) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(kBase + 8 * kMiB, kMiB, 2), TrackResult::kTracked);
  EXPECT_FALSE(tracker.untrack(kBase + 1));  // only by base
  ASSERT_TRUE(tracker.untrack(kBase));
  EXPECT_FALSE(tracker.last_use(1).has_value());
  SubmissionUse use;
  const uint64_t words[] = {kBase, kBase + 8 * kMiB};
  tracker.record_words(0, words, use);
  EXPECT_EQ(blocks_of(use), std::vector<BlockId>{2});
  ASSERT_TRUE(tracker.untrack(kBase + 8 * kMiB));
  EXPECT_TRUE(tracker.idle());
  // The id and the range may come back.
  EXPECT_EQ(tracker.track(kBase, kMiB, 2), TrackResult::kTracked);
}

TEST(UseTracker, WordsThatAreNotPointersTouchNothing) {
  UseTracker tracker;
  for (BlockId block = 0; block < 100; ++block)
    ASSERT_EQ(tracker.track(kBase + block * 4 * kMiB, 2 * kMiB, block), TrackResult::kTracked);
  SubmissionUse use;
  // Integers, floats, a gap between ranges, host-looking pointers.
  const uint64_t words[] = {0, 1, 0x3f800000, 0x400921fb54442d18, kBase + 2 * kMiB + 5,
                            kBase + 399 * kMiB, 0x00005555deadbeef, 0x7ffd12345678};
  tracker.record_words(3, words, use);
  EXPECT_EQ(use.count, 0u);
  EXPECT_EQ(use.sequence, 0u);
}

TEST(UseTracker, LastUseIsTheNewestSubmissionAndItsStream) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(kBase + kMiB, kMiB, 2), TrackResult::kTracked);
  EXPECT_EQ(tracker.last_use(1)->sequence, 0u);  // never used
  SubmissionUse first, second;
  const uint64_t both[] = {kBase, kBase + kMiB};
  tracker.record_words(10, both, first);
  const AddressRange copy[] = {{kBase + kMiB - 4, 2}};
  tracker.record_ranges(20, copy, second);
  EXPECT_LT(first.sequence, second.sequence);
  EXPECT_EQ(blocks_of(second), std::vector<BlockId>{1});
  EXPECT_EQ(tracker.last_use(1)->sequence, second.sequence);
  EXPECT_EQ(tracker.last_use(1)->stream, 20u);
  EXPECT_EQ(tracker.last_use(2)->sequence, first.sequence);
  EXPECT_EQ(tracker.last_use(2)->stream, 10u);
}

TEST(UseTracker, RangesTouchEveryBlockTheyMeet) {
  UseTracker tracker;
  for (BlockId block = 0; block < 4; ++block)
    ASSERT_EQ(tracker.track(kBase + block * 2 * kMiB, kMiB, block), TrackResult::kTracked);
  SubmissionUse use;
  // From inside block 1 to the first byte of block 3; an empty range names nothing.
  const AddressRange ranges[] = {{kBase + 2 * kMiB + 100, 4 * kMiB - 99}, {kBase, 0}};
  tracker.record_ranges(0, ranges, use);
  EXPECT_EQ(blocks_of(use), (std::vector<BlockId>{1, 2, 3}));
  // One that runs past the end of the address space is cut there.
  const AddressRange wrapping[] = {{kBase + 6 * kMiB + 5, ~uint64_t{0}}};
  tracker.record_ranges(0, wrapping, use);
  EXPECT_EQ(blocks_of(use), std::vector<BlockId>{3});
}

TEST(UseTracker, EverythingStampsEveryBlockAtOnce) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, kMiB, 1), TrackResult::kTracked);
  SubmissionUse use;
  tracker.record_everything(99, use);
  EXPECT_TRUE(use.everything);
  EXPECT_EQ(use.count, 0u);
  EXPECT_EQ(tracker.last_use(1)->sequence, use.sequence);
  EXPECT_EQ(tracker.last_use(1)->stream, 99u);
  EXPECT_EQ(tracker.last_everything().sequence, use.sequence);
}

TEST(UseTracker, MoreBlocksThanFitMeanEverything) {
  UseTracker tracker;
  std::vector<uint64_t> words;
  for (BlockId block = 0; block <= SubmissionUse::kCapacity; ++block) {
    ASSERT_EQ(tracker.track(kBase + block * kMiB, kMiB, block), TrackResult::kTracked);
    words.push_back(kBase + block * kMiB);
  }
  SubmissionUse use;
  tracker.record_words(0, words, use);
  EXPECT_EQ(use.count, SubmissionUse::kCapacity);
  EXPECT_TRUE(use.everything);
  // The block that did not fit is stamped all the same.
  EXPECT_EQ(tracker.last_use(SubmissionUse::kCapacity)->sequence, use.sequence);
}

TEST(UseTracker, AsManyBlocksAsFitAreListedOnceEachHoweverOftenNamed) {
  UseTracker tracker;
  std::vector<uint64_t> words;
  for (BlockId block = 0; block < SubmissionUse::kCapacity; ++block) {
    ASSERT_EQ(tracker.track(kBase + block * kMiB, kMiB, block), TrackResult::kTracked);
    words.push_back(kBase + block * kMiB);
  }
  // Each block named again further in, and once more out of order, as a launch's many tensor
  // lists name the same blocks (multi-tensor kernels).
  for (BlockId block = 0; block < SubmissionUse::kCapacity; ++block)
    words.push_back(kBase + block * kMiB + 64);
  words.push_back(kBase + 7 * kMiB);
  SubmissionUse use;
  tracker.record_words(0, words, use);
  EXPECT_EQ(use.count, SubmissionUse::kCapacity);
  EXPECT_FALSE(use.everything);
  for (BlockId block = 0; block < SubmissionUse::kCapacity; ++block) {
    EXPECT_EQ(use.blocks[block], block) << "listed in the order first touched";
    EXPECT_EQ(use.bases[block], kBase + block * kMiB);
  }
}

TEST(UseTracker, ManyChunksPerRange) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 1000 * kMiB + 4096, 5), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(kBase + 1001 * kMiB, kMiB, 6), TrackResult::kTracked);
  SubmissionUse use;
  const uint64_t words[] = {kBase + 999 * kMiB + 17, kBase + 1000 * kMiB + 4095,
                            kBase + 1000 * kMiB + 4096};
  tracker.record_words(0, words, use);
  EXPECT_EQ(blocks_of(use), std::vector<BlockId>{5});
}

// Readers look up and stamp while a writer tracks and untracks: every hit names the block that
// holds the word (never a freed or stale record), and block 0, tracked throughout, is always
// found. Run under ThreadSanitizer (tools/test.sh's tsan tree) this also checks that retired
// snapshots and records are freed only after their readers left (Note [Retiring a snapshot]).
TEST(UseTracker, ManyReadersWhileAWriterTracksAndUntracks) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, kMiB, 0), TrackResult::kTracked);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0};
  std::atomic<int> wrong{0};
  const auto reader = [&](uint64_t stream) {
    SubmissionUse use;
    for (uint64_t round = 0; !stop.load(std::memory_order_relaxed); ++round) {
      const BlockId probe = 1 + round % 20;
      const uint64_t words[] = {kBase + 17, kBase + probe * 2 * kMiB + 8, 12345};
      tracker.record_words(stream, words, use);
      if (use.count == 0 || use.blocks[0] != 0) wrong.fetch_add(1);
      if (use.count == 2 && use.blocks[1] != probe) wrong.fetch_add(1);
      const AddressRange copy[] = {{kBase + probe * 2 * kMiB, 1}};
      tracker.record_ranges(stream, copy, use);
      if (use.count == 1 && use.blocks[0] != probe) wrong.fetch_add(1);
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> readers;
  for (uint64_t stream = 1; stream <= 4; ++stream) readers.emplace_back(reader, stream);
  // The writer starts once every reader is reading.
  while (rounds.load() < 100) std::this_thread::yield();
  for (int cycle = 0; cycle < 10; ++cycle) {
    for (BlockId block = 1; block <= 20; ++block)
      ASSERT_EQ(tracker.track(kBase + block * 2 * kMiB, kMiB, block), TrackResult::kTracked);
    (void)tracker.last_use(1);
    for (BlockId block = 1; block <= 20; ++block)
      ASSERT_TRUE(tracker.untrack(kBase + block * 2 * kMiB));
  }
  stop.store(true);
  for (std::thread& thread : readers) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(tracker.last_use(0)->sequence, 0u);
}

}  // namespace
}  // namespace vramspill::core
