// Promotions that arrive on the stream (Note [Promotions that arrive on the stream] in
// tiers/granule_arena.h): remapped at once, copied while the host goes on, waited for by the
// submissions that touch them, and retired only once their copies are done.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "arena_test_fixtures.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kStream = 0x5157;

class GranuleArrivalTest : public GranuleMoveTest {
 protected:
  MoveOutcome arrive(std::vector<CUdeviceptr> bases) {
    std::vector<GranuleMove> promotions;
    for (const CUdeviceptr base : bases)
      promotions.push_back({.base = base, .to = kDevice, .granules = 0});
    const core::RemapWindow::Exclusive exclusive = window_.close();
    return arena_.arrive(promotions, exclusive, queued_);
  }
  // What a submission that touches `bases` is made to wait for, on its stream.
  std::vector<uint64_t> waits_of(std::vector<uint64_t> bases, bool everything = false) {
    const std::size_t before = ops_.stream_orders().size();
    const core::RemapWindow::Submission submission = window_.enter();
    EXPECT_EQ(arena_.order_after_arrivals(kStream, bases, everything, false), CUDA_SUCCESS);
    std::vector<uint64_t> events;
    for (std::size_t i = before; i < ops_.stream_orders().size(); ++i) {
      EXPECT_EQ(ops_.stream_orders()[i].stream, kStream);
      events.push_back(ops_.stream_orders()[i].event);
    }
    return events;
  }
  // Any operation in a closed window retires what has arrived: here, an empty batch.
  void retire() { move({}); }

  FakeQueuedWork queued_;
};

TEST_F(GranuleArrivalTest, ThePromotionIsRemappedAtOnceAndItsCopyLeftRunning) {
  const CUdeviceptr base = tagged_block(3, 0);
  const MoveOutcome outcome = arrive({base});
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
  EXPECT_EQ(stats.in_flight_host_granules, 3u) << "the copy still reads them";
  EXPECT_EQ(ops_.reservations(), 2u) << "the block's range and the copy's";
  EXPECT_EQ(ops_.live_events(), 1u);
}

TEST_F(GranuleArrivalTest, SubmissionsThatMayTouchTheBlockWaitForItsCopy) {
  const CUdeviceptr arriving = tagged_block(2, 0);
  const CUdeviceptr other = tagged_block(1, 1);
  arrive({arriving});
  const std::vector<uint64_t> waits = waits_of({other, arriving});
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits_of({other}), std::vector<uint64_t>{}) << "another block's work goes on";
  EXPECT_EQ(waits_of({}, true), waits) << "a submission that cannot say what it touches waits";
  EXPECT_FALSE(ops_.stream_orders().back().on_host);
}

TEST_F(GranuleArrivalTest, WhatArrivedRetiresInTheNextWindowAndNotBefore) {
  const CUdeviceptr base = tagged_block(2, 0);
  arrive({base});
  retire();
  EXPECT_EQ(ops_.live_events(), 1u) << "the copy is not done: nothing is retired";
  EXPECT_EQ(ops_.reservations(), 2u);
  ops_.finish_copies();
  EXPECT_EQ(waits_of({base}).size(), 1u) << "until then, submissions still wait (for nothing)";
  retire();
  EXPECT_EQ(ops_.live_events(), 0u);
  EXPECT_EQ(ops_.reservations(), 1u);
  EXPECT_EQ(ops_.mappings(), 2u) << "the block's own mappings only";
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.in_flight_host_granules, 0u);
  EXPECT_EQ(stats.pooled_host_granules, 2u);
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{});
  expect_tags(base, 2);
}

TEST_F(GranuleArrivalTest, AnArrivingBlockMayBeEvictedAtOnce) {
  const CUdeviceptr base = tagged_block(2, 0);
  arrive({base});
  const core::RemapWindow::Exclusive exclusive = window_.close();
  const GranuleMove eviction{.base = base, .to = kHost, .granules = 0};
  EXPECT_EQ(arena_.move(std::span(&eviction, 1), exclusive, &queued_).to_host, 2u);
  EXPECT_EQ(kinds(base, 2), (std::vector{kHost, kHost}));
  expect_tags(base, 2);
}

TEST_F(GranuleArrivalTest, FreeingAnArrivingBlockWaitsForItsCopy) {
  const CUdeviceptr base = tagged_block(2, 0);
  arrive({base});
  ASSERT_TRUE(arena_.free(base));
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(ops_.mappings(), 0u) << "the copy's range is retired with it";
  EXPECT_EQ(ops_.reservations(), 0u);
  EXPECT_EQ(arena_.stats().pooled_host_granules, 2u);
  EXPECT_EQ(ops_.live_events(), 1u) << "the event goes only in a closed window";
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{});
  retire();
  EXPECT_EQ(ops_.live_events(), 0u);
}

TEST_F(GranuleArrivalTest, ACopyThatCannotBeQueuedIsMadeInTheWindow) {
  const CUdeviceptr base = tagged_block(2, 0);
  ops_.fail(Call::kCopy, 1, CUDA_ERROR_LAUNCH_FAILED);
  const MoveOutcome outcome = arrive({base});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(outcome.on_stream, 0u);
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(ops_.live_events(), 0u);
  EXPECT_EQ(ops_.reservations(), 1u);
  expect_tags(base, 2);
}

TEST_F(GranuleArrivalTest, WithoutAnEventTheHostWaitsForTheCopy) {
  const CUdeviceptr base = tagged_block(2, 0);
  ops_.fail(Call::kRecord, 1, CUDA_ERROR_UNKNOWN);
  const MoveOutcome outcome = arrive({base});
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(outcome.on_stream, 0u) << "nothing for submissions to wait for";
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(ops_.reservations(), 1u) << "retired at once";
  EXPECT_EQ(waits_of({base}), std::vector<uint64_t>{});
  expect_tags(base, 2);
}

TEST_F(GranuleArrivalTest, ARemapThatFailsLeavesTheRestOfTheBatchOnTheHost) {
  const CUdeviceptr first = tagged_block(2, 0);
  const CUdeviceptr second = tagged_block(2, 0);
  // Four maps of host granules, four of device granules, two remaps of the first block; the
  // remap of the second block's first granule fails.
  ops_.fail(Call::kMap, 11, CUDA_ERROR_UNKNOWN);
  const MoveOutcome outcome = arrive({first, second});
  EXPECT_EQ(outcome.result, CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(outcome.to_device, 2u);
  EXPECT_EQ(kinds(first, 2), (std::vector{kDevice, kDevice}));
  EXPECT_EQ(kinds(second, 2), (std::vector{kHost, kHost}));
  expect_tags(first, 2);
  expect_tags(second, 2);
  EXPECT_EQ(waits_of({second}), std::vector<uint64_t>{}) << "nothing of it arrives";
  EXPECT_EQ(waits_of({first}).size(), 1u);
  EXPECT_EQ(arena_.stats().in_flight_device_granules, 2u) << "the copy still writes them";
  ops_.finish_copies();
  retire();
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.in_flight_device_granules, 0u);
  EXPECT_EQ(stats.pooled_host_granules, 2u);
  EXPECT_EQ(ops_.reservations(), 2u);
}

TEST_F(GranuleArrivalTest, BeyondTheArrivalsInFlightTheCopyIsMadeInTheWindow) {
  std::vector<CUdeviceptr> bases;
  for (int i = 0; i < 9; ++i) bases.push_back(tagged_block(1, 0));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(arrive({bases[i]}).on_stream, 1u) << "arrival " << i;
  EXPECT_EQ(ops_.calls(Call::kWait), 0);
  const MoveOutcome ninth = arrive({bases[8]});
  EXPECT_EQ(ninth.to_device, 1u);
  EXPECT_EQ(ninth.on_stream, 0u);
  EXPECT_EQ(ops_.calls(Call::kWait), 1);
  EXPECT_EQ(waits_of({}, true).size(), 8u);
  retire();  // the window's copy waited for the stream: everything before it is done
  EXPECT_EQ(ops_.live_events(), 0u);
  for (const CUdeviceptr base : bases) expect_tags(base, 1);
}

TEST_F(GranuleArrivalTest, DuringACaptureTheHostWaits) {
  const CUdeviceptr base = tagged_block(1, 0);
  arrive({base});
  const std::array<uint64_t, 1> touched{base};
  const core::RemapWindow::Submission submission = window_.enter();
  EXPECT_EQ(arena_.order_after_arrivals(kStream, touched, false, true), CUDA_SUCCESS);
  ASSERT_EQ(ops_.stream_orders().size(), 1u);
  EXPECT_TRUE(ops_.stream_orders().front().on_host);
}

TEST_F(GranuleArrivalTest, AnOrderThatFailsIsReported) {
  const CUdeviceptr base = tagged_block(1, 0);
  arrive({base});
  ops_.fail(Call::kOrderStream, 1, CUDA_ERROR_INVALID_CONTEXT);
  const std::array<uint64_t, 1> touched{base};
  const core::RemapWindow::Submission submission = window_.enter();
  EXPECT_EQ(arena_.order_after_arrivals(kStream, touched, false, false),
            CUDA_ERROR_INVALID_CONTEXT);
}

}  // namespace
}  // namespace vramspill::tiers
