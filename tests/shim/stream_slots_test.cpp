// core::StreamSlots and UseTracker::take_streams: which streams the tracked remap window waits
// for (Note [Stream slots] in shim/core/stream_slots.h, Note [The tracked window] in
// shim/placement/tracked_work.h).
#include "core/stream_slots.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
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
constexpr uint64_t kContext = 0xc0;  // the CUcontext the events are recorded in

std::vector<uint64_t> streams_of(const StreamSlots::Waiting& waiting) {
  std::vector<uint64_t> streams;
  for (const StreamEnd& end : waiting.ends) streams.push_back(end.stream);
  std::ranges::sort(streams);
  return streams;
}

// A submission on the stream of `bit` from its mark to its end, recording the event the slots
// ask for as 1000 + its mark. Its mark.
uint64_t submit(StreamSlots& slots, uint64_t bit) {
  const StreamSlots::Mark mark = slots.begin_call(bit);
  if (const auto due = slots.end_call(mark)) slots.recorded(*due, 1000 + mark.value, kContext);
  return mark.value;
}

TEST(StreamSlots, EachStreamHasItsOwnBitAndTheLegacyStreamHasOne) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  const uint64_t b = slots.bit_of(kStreamB);
  EXPECT_NE(a, b);
  EXPECT_EQ(slots.bit_of(kStreamA), a);
  EXPECT_EQ(slots.bit_of(0), slots.bit_of(kLegacy));  // two names of one stream
  const StreamSlots::Waiting waiting = slots.waiting_for(a | b | slots.bit_of(0), 0);
  EXPECT_FALSE(waiting.whole_device);
  EXPECT_EQ(streams_of(waiting), (std::vector<uint64_t>{0, kStreamA, kStreamB}));
}

TEST(StreamSlots, ThePerThreadStreamAndStreamsPastTheSlotsMeanTheWholeDevice) {
  StreamSlots slots;
  EXPECT_EQ(slots.bit_of(kPerThread), StreamSlots::kUnknownBit);
  for (uint64_t stream = 1; stream <= StreamSlots::kSlots; ++stream)
    EXPECT_NE(slots.bit_of(stream << 12), StreamSlots::kUnknownBit) << stream;
  EXPECT_EQ(slots.bit_of((StreamSlots::kSlots + 1) << 12), StreamSlots::kUnknownBit);
  EXPECT_TRUE(slots.waiting_for(StreamSlots::kUnknownBit, 0).whole_device);
}

// Note [Last uses by event]: every kRecordEvery marks of a stream an event is recorded; a move
// waits for the oldest event at or past the marks it needs, or for the whole stream.
TEST(StreamSlots, AMoveWaitsForTheFirstEventPastItsLastUse) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  for (int i = 0; i < 10; ++i) submit(slots, a);  // marks 1..10; events after 4 and 8
  const auto end_for = [&](uint64_t through) {
    const StreamSlots::Waiting waiting = slots.waiting_for(a, through);
    EXPECT_EQ(waiting.ends.size(), 1u);
    return waiting.ends.empty() ? ~uint64_t{0} : waiting.ends[0].event;
  };
  EXPECT_EQ(end_for(3), 1004u);
  EXPECT_EQ(end_for(4), 1004u);
  EXPECT_EQ(end_for(5), 1008u);
  EXPECT_EQ(end_for(9), 0u) << "no event after mark 9 yet: the whole stream";
}

TEST(StreamSlots, EachStreamRecordsEveryFourthOfItsOwnSubmissions) {
  StreamSlots slots;
  std::vector<uint64_t> bits;
  for (uint64_t stream = 1; stream <= 4; ++stream) bits.push_back(slots.bit_of(stream << 12));
  int recordings = 0;
  for (int round = 0; round < 8; ++round)
    for (const uint64_t bit : bits) {  // the streams take turns
      const StreamSlots::Mark mark = slots.begin_call(bit);
      if (const auto due = slots.end_call(mark)) {
        ++recordings;
        slots.recorded(*due, 1000 + mark.value, kContext);
      }
    }
  EXPECT_EQ(recordings, 8) << "two events for each stream's eight submissions";
}

TEST(StreamSlots, EventsFromTwoContextsOnOneSlotMeanTheWholeDevice) {
  StreamSlots slots;
  const uint64_t legacy = slots.bit_of(0);  // each context has a legacy stream of that name
  for (int i = 0; i < 4; ++i) submit(slots, legacy);
  ASSERT_NE(slots.waiting_for(legacy, 1).ends.at(0).event, 0u);
  std::optional<StreamSlots::Recording> due;
  for (int i = 0; i < 4 && !due; ++i) due = slots.end_call(slots.begin_call(legacy));
  ASSERT_TRUE(due);
  EXPECT_FALSE(slots.recorded(*due, 2000, kContext + 1)) << "the caller destroys that event";
  EXPECT_TRUE(slots.waiting_for(legacy, 1).whole_device);
}

// A use queued on the legacy stream in a second context, between two events of the first: the
// first context's next event says nothing of it, so the slot is the whole device from its mark.
TEST(StreamSlots, ALegacyStreamUseInASecondContextMeansTheWholeDevice) {
  StreamSlots slots;
  const uint64_t legacy = slots.bit_of(0);
  for (int i = 0; i < 4; ++i) submit(slots, legacy);  // the first context's, with an event
  const StreamSlots::Mark first = slots.begin_call(legacy);
  slots.submitted_in(first, 0, kContext);
  ASSERT_FALSE(slots.end_call(first));
  EXPECT_FALSE(slots.waiting_for(legacy, first.value).whole_device) << "one context so far";
  const StreamSlots::Mark second = slots.begin_call(legacy);
  slots.submitted_in(second, 0, kContext + 1);
  (void)slots.end_call(second);
  EXPECT_TRUE(slots.waiting_for(legacy, second.value).whole_device);
  const uint64_t named = slots.bit_of(kStreamA);  // a stream of its own context only
  const StreamSlots::Mark other = slots.begin_call(named);
  slots.submitted_in(other, kStreamA, kContext + 1);
  (void)slots.end_call(other);
  EXPECT_FALSE(slots.waiting_for(named, other.value).whole_device);
}

TEST(StreamSlots, NoEventIsRecordedWhileAnEarlierSubmissionOfTheStreamIsInItsCall) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  for (int i = 0; i < 2; ++i) submit(slots, a);          // marks 1 and 2: no event due yet
  const StreamSlots::Mark first = slots.begin_call(a);   // mark 3, still in its driver call
  const StreamSlots::Mark second = slots.begin_call(a);  // mark 4
  EXPECT_FALSE(slots.end_call(second)) << "mark 3 may not be queued yet";
  const auto due = slots.end_call(first);
  ASSERT_TRUE(due) << "every submission of the stream is done with its call";
  EXPECT_EQ(due->mark, first.value);
  slots.recorded(*due, 77, kContext);
  EXPECT_EQ(slots.waiting_for(a, second.value - 1).ends.at(0).event, 77u);
}

std::vector<uint64_t> destroyed;
void remember_destroyed(uint64_t event) { destroyed.push_back(event); }

TEST(StreamSlots, ADestroyedStreamMeansTheWholeDeviceUntilTheDeviceDrained) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  for (int i = 0; i < 4; ++i) submit(slots, a);
  destroyed.clear();
  slots.retire(kStreamA, &remember_destroyed);
  EXPECT_EQ(destroyed, std::vector<uint64_t>{1004}) << "the slot's events go with it";
  {
    const StreamSlots::Waiting waiting = slots.waiting_for(a, 0);
    EXPECT_TRUE(waiting.whole_device);
    EXPECT_TRUE(waiting.ends.empty());
    // A new stream at the same handle is another stream: not the retired slot, even for a thread
    // that looked the old one up before.
    EXPECT_NE(slots.bit_of(kStreamA), a);
    slots.device_drained(waiting);
  }
  // The slot is free again: what still holds its bit waits for nothing of the old stream.
  const StreamSlots::Waiting after = slots.waiting_for(a, 0);
  EXPECT_FALSE(after.whole_device);
  EXPECT_TRUE(after.ends.empty());
}

TEST(StreamSlots, ADestroyedContextRetiresEveryStream) {
  StreamSlots slots;
  const uint64_t a = slots.bit_of(kStreamA);
  const uint64_t legacy = slots.bit_of(0);
  slots.retire_all();
  EXPECT_TRUE(slots.waiting_for(a, 0).whole_device);
  EXPECT_TRUE(slots.waiting_for(legacy, 0).whole_device);
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
      const StreamSlots::Waiting waiting = slots.waiting_for(bits[t][stream - 1], 0);
      EXPECT_EQ(streams_of(waiting), std::vector<uint64_t>{stream << 12}) << t << " " << stream;
    }
}

// What the submission hooks do in tracked mode: record, then mark inside the window, call the
// driver, end.
void submit(UseTracker& tracker, const SubmissionUse& use) {
  const StreamSlots::Mark mark = tracker.mark_streams(use);
  if (const auto due = tracker.stream_slots().end_call(mark))
    tracker.stream_slots().recorded(*due, 1000 + mark.value, kContext);
}
void submit_words(UseTracker& tracker, uint64_t stream, uint64_t word) {
  SubmissionUse use;
  const uint64_t words[] = {word};
  tracker.record_words(stream, words, use);
  submit(tracker, use);
}

TEST(UseTrackerStreams, AMoveWaitsForTheStreamsMarkedOnItsBlocksOnce) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(kBase + 4 * kMiB, 2 * kMiB, 2), TrackResult::kTracked);
  submit_words(tracker, kStreamA, kBase + 8);
  SubmissionUse copy;
  tracker.record_ranges(kStreamB, std::vector<AddressRange>{{kBase + kMiB, 16}}, copy);
  submit(tracker, copy);
  submit_words(tracker, 0, kBase + 4 * kMiB);
  StreamSlots& slots = tracker.stream_slots();
  const BlockId block_one[] = {1};
  const UseTracker::QueuedUses queued = tracker.take_streams(block_one);
  EXPECT_EQ(queued.through, 2u) << "the marks of its two submissions";
  EXPECT_EQ(streams_of(slots.waiting_for(queued.bits, queued.through)),
            (std::vector<uint64_t>{kStreamA, kStreamB}));
  EXPECT_EQ(tracker.take_streams(block_one).bits, 0u) << "taken bits are cleared";
  const BlockId block_two[] = {2};
  const UseTracker::QueuedUses second = tracker.take_streams(block_two);
  EXPECT_EQ(second.through, 3u);
  EXPECT_EQ(streams_of(slots.waiting_for(second.bits, second.through)), std::vector<uint64_t>{0});
}

TEST(UseTrackerStreams, RecordingAloneMarksNothing) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  SubmissionUse use;
  const uint64_t words[] = {kBase};
  tracker.record_words(kStreamA, words, use);  // not yet inside the window
  const BlockId block[] = {1};
  EXPECT_EQ(tracker.take_streams(block).bits, 0u);
  submit(tracker, use);
  EXPECT_EQ(streams_of(tracker.stream_slots().waiting_for(tracker.take_streams(block).bits, 0)),
            std::vector<uint64_t>{kStreamA});
}

TEST(UseTrackerStreams, SubmissionsThatTouchEverythingAndUntrackedBlocksCountForEveryMove) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  SubmissionUse graph;
  tracker.record_everything(kStreamB, graph);  // a graph launch
  submit(tracker, graph);
  const BlockId block[] = {1};
  const UseTracker::QueuedUses queued = tracker.take_streams(block);
  EXPECT_EQ(queued.through, 1u) << "the graph launch's mark";
  EXPECT_EQ(streams_of(tracker.stream_slots().waiting_for(queued.bits, queued.through)),
            std::vector<uint64_t>{kStreamB});
  tracker.put_back_streams(queued);  // a failed wait: the next move waits for them
  const BlockId untracked[] = {99};
  const uint64_t next = tracker.take_streams(untracked).bits;
  EXPECT_EQ(next & ~StreamSlots::kUnknownBit, queued.bits);
  EXPECT_TRUE(tracker.stream_slots().waiting_for(next, 0).whole_device);
}

TEST(UseTrackerStreams, PuttingBackKeepsTheMarksTheWaitWasFor) {
  UseTracker tracker;
  ASSERT_EQ(tracker.track(kBase, 2 * kMiB, 1), TrackResult::kTracked);
  ASSERT_EQ(tracker.track(kBase + 4 * kMiB, 2 * kMiB, 2), TrackResult::kTracked);
  submit_words(tracker, kStreamA, kBase + 4 * kMiB);  // mark 1, block 2
  submit_words(tracker, kStreamA, kBase);             // mark 2, block 1
  const BlockId block_one[] = {1};
  const UseTracker::QueuedUses failed = tracker.take_streams(block_one);
  ASSERT_EQ(failed.through, 2u);
  tracker.put_back_streams(failed);
  const BlockId block_two[] = {2};
  EXPECT_EQ(tracker.take_streams(block_two).through, 2u)
      << "the stream's bit came back: so must the mark it was taken for";
}

}  // namespace
}  // namespace vramspill::core
