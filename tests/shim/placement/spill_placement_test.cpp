// placement/spill_placement: the whole decision flow of an allocation that does not fit, with
// fake tiers and fake driver facts: which tiers are tried in which order for each [spill] mode,
// what never spills (Note [What spills]), what the ledger records, what the log says, and which
// tier a free goes to.
#include "placement/spill_placement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "placement_fakes.h"

namespace vramspill::placement {
namespace {

using core::Route;
using tiers::SpillAllocation;
using tiers::SpillOutcome;
using tiers::SpillRefusal;

constexpr uint64_t kMiB = uint64_t{1} << 20;

class SpillPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.mode = SpillMode::kAuto;
    config_.min_size = kMiB;
    ledger_.set_device(0, 1024 * kMiB, 512 * kMiB);
  }

  std::string log() const { return log_.text(); }

  CUresult spill(Route route, uint64_t bytes, const std::string& refusal = "over budget",
                 bool stream_ordered = false) {
    const SpillRequest request{.device = 0,
                               .route = route,
                               .bytes = bytes,
                               .stream = nullptr,
                               .stream_ordered = stream_ordered,
                               .managed_flags = CU_MEM_ATTACH_GLOBAL};
    return placement_.spill(request, refusal, &pointer_);
  }

  LogCapture log_;
  SpillConfig config_;
  core::Ledger ledger_;
  core::HostBudget host_budget_{64 * kMiB};
  FakeFacts facts_;
  FakeTier managed_{"managed memory", Route::kSpillManaged, 0x100000000};
  FakeTier host_{"the pinned host pool", Route::kSpillHost, 0x200000000};
  SpillPlacement placement_{config_, ledger_, host_budget_, facts_, managed_, host_};
  CUdeviceptr pointer_ = 0;
};

TEST_F(SpillPlacementTest, AutoPrefersManagedMemoryAndRecordsTheSpill) {
  ASSERT_EQ(spill(Route::kMemAlloc, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(pointer_, 0x100000000u);
  ASSERT_EQ(managed_.allocations.size(), 1u);
  EXPECT_EQ(managed_.allocations[0].bytes, 8 * kMiB);
  EXPECT_TRUE(host_.allocations.empty());
  EXPECT_EQ(recorded(ledger_, Route::kSpillManaged).live_bytes, 8 * kMiB);
  EXPECT_EQ(ledger_.snapshot(0).over_budget_served, 1u);
  EXPECT_EQ(ledger_.find(pointer_)->route, Route::kSpillManaged);
  EXPECT_EQ(facts_.host_limit_refreshes, 1);
  EXPECT_NE(log().find("cuMemAlloc of 8.0 MiB on device 0 spilled to managed memory (over the "
                       "device budget)"),
            std::string::npos)
      << log();
}

TEST_F(SpillPlacementTest, AutoFallsBackToTheHostPoolWhenManagedMemoryRefuses) {
  managed_.answer = {.result = CUDA_ERROR_OUT_OF_MEMORY, .refusal = SpillRefusal::kDriver};
  ASSERT_EQ(spill(Route::kMemAlloc, 8 * kMiB, ""), CUDA_SUCCESS);
  EXPECT_EQ(pointer_, 0x200000000u);
  EXPECT_EQ(recorded(ledger_, Route::kSpillHost).live_bytes, 8 * kMiB);
  EXPECT_EQ(recorded(ledger_, Route::kSpillManaged).live_bytes, 0u);
  // The driver ran out, not the budget: not a refusal of the ledger's.
  EXPECT_EQ(ledger_.snapshot(0).over_budget_served, 0u);
  EXPECT_NE(log().find("spilled to the pinned host pool (the driver is out of device memory)"),
            std::string::npos);
}

TEST_F(SpillPlacementTest, HostModeNeverTriesManagedMemory) {
  config_.mode = SpillMode::kHost;
  ASSERT_EQ(spill(Route::kMemAllocAsync, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_EQ(host_.allocations.size(), 1u);
}

TEST_F(SpillPlacementTest, ManagedModeUsesTheHostPoolOnlyWithoutConcurrentManagedAccess) {
  config_.mode = SpillMode::kManaged;
  managed_.answer = {.result = CUDA_ERROR_OUT_OF_MEMORY, .refusal = SpillRefusal::kHostLimit};
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(host_.allocations.empty()) << "managed mode with managed memory refusing";

  managed_.support = false;
  FakeTier unsupported_managed{"managed memory", Route::kSpillManaged, 0x300000000};
  unsupported_managed.support = false;
  SpillPlacement placement{config_, ledger_, host_budget_, facts_, unsupported_managed, host_};
  const SpillRequest request{.device = 0, .route = Route::kMemAlloc, .bytes = 4 * kMiB};
  ASSERT_EQ(placement.spill(request, "over budget", &pointer_), CUDA_SUCCESS);
  EXPECT_EQ(host_.allocations.size(), 1u);
  EXPECT_NE(log().find("has no concurrent managed access: spilling to the pinned host pool"),
            std::string::npos);
}

TEST_F(SpillPlacementTest, ManagedAllocationsSpillOnlyToManagedMemory) {
  config_.mode = SpillMode::kHost;
  managed_.answer = {.result = CUDA_ERROR_OUT_OF_MEMORY, .refusal = SpillRefusal::kHostLimit};
  EXPECT_EQ(spill(Route::kMemAllocManaged, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(managed_.allocations.size(), 1u);
  EXPECT_TRUE(host_.allocations.empty());
}

TEST_F(SpillPlacementTest, OffModeRefusesWithTheLedgersReason) {
  config_.mode = SpillMode::kOff;
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB, "cuMemAlloc of 4.0 MiB refused: over budget"),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_TRUE(host_.allocations.empty());
  EXPECT_EQ(managed_.support_queries, 0);
  EXPECT_NE(log().find("cuMemAlloc of 4.0 MiB refused: over budget"), std::string::npos);
}

TEST_F(SpillPlacementTest, WhatNeverSpillsIsRefusedBeforeAnyTierIsAsked) {
  facts_.is_integrated = true;
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  facts_.is_integrated = false;
  EXPECT_EQ(spill(Route::kMemAlloc, kMiB - 1), CUDA_ERROR_OUT_OF_MEMORY);
  facts_.is_capturing = true;
  EXPECT_EQ(spill(Route::kMemAllocAsync, 4 * kMiB, "over budget", /*stream_ordered=*/true),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(managed_.support_queries + host_.support_queries, 0);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_TRUE(host_.allocations.empty());
  const std::string text = log();
  EXPECT_NE(text.find("the device is integrated"), std::string::npos) << text;
  EXPECT_NE(text.find("smaller than [spill] min_size (1.0 MiB)"), std::string::npos) << text;
  EXPECT_NE(text.find("its stream is being captured into a graph"), std::string::npos) << text;
}

// Note [Stream-ordered spills beside a capture]: while another stream captures, a stream-ordered
// spill makes no managed memory; the host pool takes it, and other spills go on as before.
TEST_F(SpillPlacementTest, AStreamOrderedSpillBesideACaptureSkipsManagedMemory) {
  facts_.capture_anywhere = true;
  EXPECT_EQ(spill(Route::kMemAllocAsync, 4 * kMiB, "over budget", /*stream_ordered=*/true),
            CUDA_SUCCESS);
  EXPECT_TRUE(managed_.allocations.empty());
  EXPECT_EQ(host_.allocations.size(), 1u);
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(managed_.allocations.size(), 1u) << "not stream-ordered: the program's own call";
}

// ... and no capture begins between that look and the allocation: the spill holds the gate
// every cuStreamBeginCapture takes.
TEST_F(SpillPlacementTest, AStreamOrderedSpillHoldsCapturesOffUntilItIsMade) {
  bool held_off = false;
  managed_.while_allocating = [&] {
    held_off = !facts_.capture_gate.try_lock();
    if (!held_off) facts_.capture_gate.unlock();
  };
  EXPECT_EQ(spill(Route::kMemAllocAsync, 4 * kMiB, "over budget", /*stream_ordered=*/true),
            CUDA_SUCCESS);
  ASSERT_EQ(managed_.allocations.size(), 1u);
  EXPECT_TRUE(held_off);
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_FALSE(held_off) << "the program's own call holds nothing off";
}

TEST_F(SpillPlacementTest, AStreamTheDriverDoesNotKnowGetsTheDriversError) {
  facts_.capture_query = CUDA_ERROR_INVALID_HANDLE;
  EXPECT_EQ(spill(Route::kMemAllocAsync, 4 * kMiB, "over budget", /*stream_ordered=*/true),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_TRUE(managed_.allocations.empty());
}

TEST_F(SpillPlacementTest, TheLogSaysWhichLimitStoppedEachTier) {
  managed_.answer = {.result = CUDA_ERROR_OUT_OF_MEMORY, .refusal = SpillRefusal::kHostLimit};
  host_.answer = {.result = CUDA_ERROR_OUT_OF_MEMORY, .refusal = SpillRefusal::kLockedMemoryLimit};
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(spill(Route::kMemAlloc, 128 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  host_.answer = {.result = CUDA_ERROR_UNKNOWN, .refusal = SpillRefusal::kNone};
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  const std::string text = log();
  EXPECT_NE(text.find("managed memory: the host limit is reached (0 B of 64.0 MiB in use"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("the request is larger than the whole host limit (64.0 MiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("the pinned host pool: pinned memory would exceed RLIMIT_MEMLOCK"),
            std::string::npos)
      << text;
  // A tier that fails without a reason is blamed on the driver, with its error.
  EXPECT_NE(text.find("the pinned host pool: the driver refused (error 999)"), std::string::npos)
      << text;
  EXPECT_EQ(recorded(ledger_, Route::kSpillManaged).allocations +
                recorded(ledger_, Route::kSpillHost).allocations,
            0u);
}

TEST_F(SpillPlacementTest, NoTierOnTheDeviceIsSaidSo) {
  managed_.support = false;
  host_.support = false;
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(log().find("no spill tier works on this device"), std::string::npos);
}

TEST_F(SpillPlacementTest, ASupportQueryTheDriverRefusedIsAskedAgain) {
  managed_.support = std::nullopt;
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);  // to the host pool
  managed_.support = true;
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(managed_.support_queries, 2) << "a known answer is cached, a refusal is not";
  EXPECT_EQ(managed_.allocations.size(), 2u);
}

TEST_F(SpillPlacementTest, FreesGoToTheTierThatHoldsTheSpill) {
  ASSERT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);
  const core::Allocation in_managed = *ledger_.find(pointer_);
  config_.mode = SpillMode::kHost;
  ASSERT_EQ(spill(Route::kMemAlloc, 4 * kMiB), CUDA_SUCCESS);
  const core::Allocation in_host = *ledger_.find(pointer_);

  EXPECT_EQ(placement_.free(in_managed, nullptr, /*stream_ordered=*/false), CUDA_SUCCESS);
  EXPECT_EQ(placement_.free(in_host, nullptr, /*stream_ordered=*/true), CUDA_SUCCESS);
  EXPECT_EQ(managed_.frees, std::vector<CUdeviceptr>{in_managed.key});
  EXPECT_EQ(host_.stream_ordered_frees, std::vector<CUdeviceptr>{in_host.key});
  EXPECT_TRUE(host_.frees.empty());

  const core::Allocation not_spilled{
      .key = 0x42, .bytes = kMiB, .device = 0, .route = Route::kMemAlloc};
  EXPECT_EQ(placement_.free(not_spilled, nullptr, false), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SpillPlacementTest, AStreamOrderedFreeDuringCaptureIsRefused) {
  ASSERT_EQ(spill(Route::kMemAllocAsync, 4 * kMiB), CUDA_SUCCESS);
  const core::Allocation spilled = *ledger_.find(pointer_);
  facts_.is_capturing = true;
  EXPECT_EQ(placement_.free(spilled, nullptr, /*stream_ordered=*/true),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(managed_.stream_ordered_frees.empty());
  // An immediate free asks nothing of the stream.
  EXPECT_EQ(placement_.free(spilled, nullptr, /*stream_ordered=*/false), CUDA_SUCCESS);
  EXPECT_EQ(facts_.capture_queries, 1);
}

TEST(SpillTierTest, RefusesANullOutputOrAnEmptyRequestItself) {
  FakeTier tier{"fake", Route::kSpillHost, 0x1000};
  CUdeviceptr out = 0;
  EXPECT_EQ(tier.allocate({.device = 0, .bytes = kMiB}, nullptr).result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(tier.allocate({.device = 0, .bytes = 0}, &out).result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(tier.allocations.empty());
  EXPECT_FALSE(tier.supported(-1));
  EXPECT_FALSE(tier.supported(64));
  EXPECT_EQ(tier.support_queries, 0);
}

TEST(SpillTierTest, ASuccessCarriesNoRefusal) {
  FakeTier tier{"fake", Route::kSpillHost, 0x1000};
  tier.answer = {.result = CUDA_SUCCESS, .refusal = SpillRefusal::kHostLimit};
  CUdeviceptr out = 0;
  EXPECT_EQ(tier.allocate({.device = 0, .bytes = kMiB}, &out).refusal, SpillRefusal::kNone);
}

}  // namespace
}  // namespace vramspill::placement
