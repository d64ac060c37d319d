// The arena's two copy lanes on simcuda (Note [Two copy lanes] in tiers/granule_ops.h), through
// the shim's own driver calls (tiers/driver_granule_ops.h): within an epoch a copy to the host
// and one to the device run at once, across epochs one after the other, and the copies' event
// follows both lanes. Times are simcuda's model (its copies run at its link rate, each stream on
// its own clock), not measurements: they show the order the streams impose, which is what is
// tested.
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "kernel_test_support.h"
#include "tiers/driver_granule_ops.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kBytes = 64 * kMiB;

class CopyLanesTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ops_.emplace(device_, -1);
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuEventCreate(&start_, CU_EVENT_DEFAULT));
    ASSERT_CU(cuEventCreate(&stop_, CU_EVENT_DEFAULT));
    for (CUdeviceptr* device : {&device_a_, &device_b_}) ASSERT_CU(cuMemAlloc(device, kBytes));
    for (void** host : {&host_a_, &host_b_}) ASSERT_CU(cuMemAllocHost(host, kBytes));
    fill_with(device_a_, 0xA0);
    fill_with(host_address(host_b_), 0xB0);
  }
  void TearDown() override {
    ops_.reset();
    for (const CUdeviceptr device : {device_a_, device_b_}) cuMemFree(device);
    for (void* host : {host_a_, host_b_}) cuMemFreeHost(host);
    cuEventDestroy(start_);
    cuEventDestroy(stop_);
    cuStreamDestroy(stream_);
    DriverTest::TearDown();
  }

  static CUdeviceptr host_address(void* host) { return reinterpret_cast<CUdeviceptr>(host); }
  static void fill_with(CUdeviceptr at, uint32_t seed) {
    std::vector<uint32_t> words(kBytes / 4);
    for (std::size_t i = 0; i < words.size(); ++i) words[i] = seed * 2654435761u + i;
    upload(at, words);
  }
  static std::vector<uint32_t> words_at(CUdeviceptr at) { return download<uint32_t>(at, kBytes / 4); }

  // The modeled milliseconds from before `queue` until the event recorded after the copies it
  // queued: the ops' own stream is waited for by a stream of the test's, which times it.
  float modeled_ms(const std::function<void()>& queue) {
    EXPECT_CU(cuCtxSynchronize());
    EXPECT_CU(cuEventRecord(start_, stream_));
    queue();
    uint64_t copied = 0;
    EXPECT_CU(ops_->record_copies(&copied));
    EXPECT_CU(cuStreamWaitEvent(stream_, reinterpret_cast<CUevent>(copied), 0));
    EXPECT_CU(cuEventRecord(stop_, stream_));
    EXPECT_CU(cuEventSynchronize(stop_));
    ops_->drop_event(copied);
    float ms = 0;
    EXPECT_CU(cuEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

  std::optional<DriverGranuleOps> ops_;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr;
  CUevent stop_ = nullptr;
  CUdeviceptr device_a_ = 0;
  CUdeviceptr device_b_ = 0;
  void* host_a_ = nullptr;
  void* host_b_ = nullptr;
};

TEST_F(CopyLanesTest, ACopyEachWayRunsAtOnceWithinAnEpoch) {
  const float one_way = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
  });
  const std::vector<uint32_t> a = words_at(device_a_);
  const std::vector<uint32_t> b = words_at(host_address(host_b_));
  const float both_ways = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
    ASSERT_CU(ops_->copy(device_b_, host_address(host_b_), kBytes, CopyLane::kToDevice));
  });
  EXPECT_GT(one_way, 0.5f) << "64 MiB over simcuda's link";
  EXPECT_LT(both_ways, 1.2f * one_way) << "modeled: the lanes overlap";
  EXPECT_EQ(words_at(host_address(host_a_)), a);
  EXPECT_EQ(words_at(device_b_), b);
}

TEST_F(CopyLanesTest, AnEpochFollowsEveryCopyOfTheEpochsBefore) {
  const std::vector<uint32_t> a = words_at(device_a_);
  const std::vector<uint32_t> b = words_at(host_address(host_b_));
  const float one_way = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
  });
  // The second epoch writes what the first reads: it may start only once the first is over.
  const float in_turn = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(device_a_, host_address(host_b_), kBytes, CopyLane::kToDevice));
  });
  EXPECT_GT(in_turn, 1.9f * one_way) << "modeled: the epochs run one after the other";
  EXPECT_EQ(words_at(host_address(host_a_)), a);
  EXPECT_EQ(words_at(device_a_), b);
}

// The order the fork keeps: an eviction's copy into a host granule a promotion of the epoch
// before still reads (a pooled granule taken again) must wait for it.
TEST_F(CopyLanesTest, AToHostCopyFollowsTheToDeviceCopiesOfTheEpochsBefore) {
  const std::vector<uint32_t> b = words_at(host_address(host_b_));
  const std::vector<uint32_t> a = words_at(device_a_);
  const float one_way = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(device_b_, host_address(host_b_), kBytes, CopyLane::kToDevice));
  });
  const float in_turn = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(device_b_, host_address(host_b_), kBytes, CopyLane::kToDevice));
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_b_), device_a_, kBytes, CopyLane::kToHost));
  });
  EXPECT_GT(in_turn, 1.9f * one_way) << "modeled: the epochs run one after the other";
  EXPECT_EQ(words_at(device_b_), b);
  EXPECT_EQ(words_at(host_address(host_b_)), a);
}

// A copy queued after queue_copies_after() on either lane follows the events: here a copy on the
// test's stream that writes what the to-host lane then reads.
TEST_F(CopyLanesTest, TheToHostLaneFollowsWhatTheArenasStreamWaitsFor) {
  fill_with(host_address(host_b_), 0xC0);
  const std::vector<uint32_t> c = words_at(host_address(host_b_));
  const float one_way = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
  });
  const float in_turn = modeled_ms([&] {
    ASSERT_CU(cuMemcpyAsync(device_a_, host_address(host_b_), kBytes, stream_));
    CUevent written = nullptr;
    ASSERT_CU(cuEventCreate(&written, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(cuEventRecord(written, stream_));
    const uint64_t events[] = {reinterpret_cast<uint64_t>(written)};
    ASSERT_CU(ops_->queue_copies_after(events));
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
    ASSERT_CU(cuEventDestroy(written));
  });
  EXPECT_GT(in_turn, 1.9f * one_way) << "modeled: the lane waited for the program's copy";
  EXPECT_EQ(words_at(host_address(host_a_)), c);
}

TEST_F(CopyLanesTest, WaitingForTheCopiesWaitsForBothLanes) {
  const float one_way = modeled_ms([&] {
    ASSERT_CU(ops_->begin_copies());
    ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
  });
  const std::vector<uint32_t> a = words_at(device_a_);
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuEventRecord(start_, stream_));
  ASSERT_CU(ops_->begin_copies());
  ASSERT_CU(ops_->copy(host_address(host_a_), device_a_, kBytes, CopyLane::kToHost));
  ASSERT_CU(ops_->wait_for_copies());
  // Recorded at the host's modeled clock, which the wait moved past the copy's end.
  ASSERT_CU(cuEventRecord(stop_, stream_));
  ASSERT_CU(cuEventSynchronize(stop_));
  float waited = 0;
  ASSERT_CU(cuEventElapsedTime(&waited, start_, stop_));
  // Had it not waited, the stop would be recorded at about the start: half is the margin.
  EXPECT_GT(waited, 0.5f * one_way) << "modeled: the host waited for the to-host lane";
  std::vector<uint32_t> seen(kBytes / 4);
  std::memcpy(seen.data(), host_a_, kBytes);
  EXPECT_EQ(seen, a);
}

}  // namespace
}  // namespace vramspill::tiers
