// core::StreamSlots and UseTracker::take_streams: which streams the tracked remap window waits
// for (Note [Stream slots] in shim/core/stream_slots.h, Note [The tracked window] in
// shim/placement/tracked_work.h).
#include "core/stream_slots.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/use_tracker.h"

namespace vramspill::core {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = uint64_t{0x7f00} << 32;
constexpr uint64_t kStreamA = 0x1000;
constexpr uint64_t kStreamB = 0x2000;
const auto kLegacy = reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY);
const auto kPerThread = reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD);

std::vector<uint64_t> sorted(std::vector<uint64_t> streams) {
  std::ranges::sort(streams);
  return streams;
}

TEST(StreamSlots, EachStreamHasItsOwnBitAndTheLegacyStreamHasOne) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  const uint64_t b = slots.bit_of(kStreamB);
  EXPECT_NE(a, b);
  EXPECT_EQ(slots.bit_of(kStreamA), a);
  EXPECT_EQ(slots.bit_of(0), slots.bit_of(kLegacy));  // two names of one stream
  const StreamSlots::Waiting waiting = slots.waiting_for(a | b | slots.bit_of(0));
  EXPECT_FALSE(waiting.whole_device);
  EXPECT_EQ(sorted(waiting.streams), (std::vector<uint64_t>{0, kStreamA, kStreamB}));
}

TEST(StreamSlots, ThePerThreadStreamAndStreamsPastTheSlotsMeanTheWholeDevice) {
  StreamSlots slots;
  EXPECT_EQ(slots.bit_of(kPerThread), StreamSlots::kUnknownBit);
  for (uint64_t stream = 1; stream <= StreamSlots::kSlots; ++stream)
    EXPECT_NE(slots.bit_of(stream << 12), StreamSlots::kUnknownBit) << stream;
  EXPECT_EQ(slots.bit_of((StreamSlots::kSlots + 1) << 12), StreamSlots::kUnknownBit);
  EXPECT_TRUE(slots.waiting_for(StreamSlots::kUnknownBit).whole_device);
}

TEST(StreamSlots, ADestroyedStreamMeansTheWholeDeviceUntilTheDeviceDrained) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  slots.retire(kStreamA);
  {
    const StreamSlots::Waiting waiting = slots.waiting_for(a);
    EXPECT_TRUE(waiting.whole_device);
    EXPECT_TRUE(waiting.streams.empty());
    // A new stream at the same handle is another stream: not the retired slot, even for a thread
    // that looked the old one up before.
    EXPECT_NE(slots.bit_of(kStreamA), a);
    slots.device_drained(waiting);
  }
  // The slot is free again: what still holds its bit waits for nothing of the old stream.
  const StreamSlots::Waiting after = slots.waiting_for(a);
  EXPECT_FALSE(after.whole_device);
  EXPECT_TRUE(after.streams.empty());
}

TEST(StreamSlots, ADestroyedContextRetiresEveryStream) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  const uint64_t legacy = slots.bit_of(0);
  slots.retire_all();
  EXPECT_TRUE(slots.waiting_for(a).whole_device);
  EXPECT_TRUE(slots.waiting_for(legacy).whole_device);
}

TEST(StreamSlots, ThreadsSeeingNewStreamsAtOnceGetBitsThatNameThem) {
  StreamSlots slots;
  // At most kThreads slots per stream if every claim races: 32, within the 63.
  constexpr int kThreads = 4;
  constexpr uint64_t kStreams = 8;
  std::vector<std::vector<uint64_t>> bits(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (uint64_t stream = 1; stream <= kStreams; ++stream)
        bits[t].push_back(slots.bit_of(stream << 12));
    });
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t)
    for (uint64_t stream = 1; stream <= kStreams; ++stream) {
      const StreamSlots::Waiting waiting = slots.waiting_for(bits[t][stream - 1]);
      EXPECT_EQ(waiting.streams, std::vector<uint64_t>{stream << 12}) << t << " " << stream;
    }
}

// What the submission hooks do in tracked mode: record, then mark once inside the window.
void submit_words(UseTracker& tracker, uint64_t stream, uint64_t word) {
  SubmissionUse use;
  const uint64_t words[] = {word};
  tracker.record_words(stream, words, use);
  tracker.mark_streams(use);
}

TEST(UseTrackerStreams, AMoveWaitsForTheStreamsMarkedOnItsBlocksOnce) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(kBase + 4 * kMiB, 2 * kMiB, 2), TrackResult::kTracked);
  submit_words(tracker, kStreamA, kBase + 8);
  SubmissionUse copy;
  tracker.record_ranges(kStreamB, std::vector<AddressRange>{{kBase + kMiB, 16}}, copy);
  tracker.mark_streams(copy);
  submit_words(tracker, 0, kBase + 4 * kMiB);
  StreamSlots& slots = tracker.stream_slots();
  const BlockId block_one[] = {1};
  const uint64_t bits = tracker.take_streams(block_one);
  EXPECT_EQ(sorted(slots.waiting_for(bits).streams), (std::vector<uint64_t>{kStreamA, kStreamB}));
  EXPECT_EQ(tracker.take_streams(block_one), 0u) << "taken bits are cleared";
  const BlockId block_two[] = {2};
  EXPECT_EQ(slots.waiting_for(tracker.take_streams(block_two)).streams, std::vector<uint64_t>{0});
}

TEST(UseTrackerStreams, RecordingAloneMarksNothing) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  SubmissionUse use;
  const uint64_t words[] = {kBase};
  tracker.record_words(kStreamA, words, use);  // not yet inside the window
  const BlockId block[] = {1};
  EXPECT_EQ(tracker.take_streams(block), 0u);
  tracker.mark_streams(use);
  EXPECT_EQ(tracker.stream_slots().waiting_for(tracker.take_streams(block)).streams,
            std::vector<uint64_t>{kStreamA});
}

TEST(UseTrackerStreams, SubmissionsThatTouchEverythingAndUntrackedBlocksCountForEveryMove) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  SubmissionUse graph;
  tracker.record_everything(kStreamB, graph);  // a graph launch
  tracker.mark_streams(graph);
  const BlockId block[] = {1};
  const uint64_t bits = tracker.take_streams(block);
  EXPECT_EQ(tracker.stream_slots().waiting_for(bits).streams, std::vector<uint64_t>{kStreamB});
  tracker.put_back_streams(bits);  // a failed wait: the next move waits for them
  const BlockId untracked[] = {99};
  const uint64_t next = tracker.take_streams(untracked);
  EXPECT_EQ(next & ~StreamSlots::kUnknownBit, bits);
  EXPECT_TRUE(tracker.stream_slots().waiting_for(next).whole_device);
}

}  // namespace
}  // namespace vramspill::core
