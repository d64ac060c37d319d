// placement/vmm_spill: a device-located cuMemCreate that does not fit, made host-located instead
// (Note [Host-located VMM spills]), with a fake tier and fake driver facts: which modes and which
// requests spill, where the handle goes and with which properties, what the host budget, the
// ledger and the VMM tracker record, and what the log says.
#include "placement/vmm_spill.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "placement_fakes.h"

namespace vramspill::placement {
namespace {

using core::KeySpace;
using core::Route;
using tiers::HostVmmLocation;
using Kind = HostVmmLocation::Kind;

constexpr uint64_t kMiB = uint64_t{1} << 20;

CUmemAllocationProp device_prop(CUmemAllocationHandleType handle_types = CU_MEM_HANDLE_TYPE_NONE) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  prop.requestedHandleTypes = handle_types;
  return prop;
}

class VmmSpillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.mode = SpillMode::kAuto;
    config_.min_size = kMiB;
    ledger_.set_device(0, 1024 * kMiB, 512 * kMiB);
  }

  CUresult spill(const CUmemAllocationProp& prop, uint64_t bytes = 4 * kMiB,
                 const std::string& refusal = "over budget") {
    const VmmSpillRequest request{.device = 0, .bytes = bytes, .prop = &prop, .flags = 0};
    return placement_.spill(request, refusal, &handle_);
  }

  core::RouteSnapshot recorded() const {
    return ledger_.snapshot(0).routes[core::route_index(Route::kSpillVmmHost)];
  }

  LogCapture log_;
  SpillConfig config_;
  core::Ledger ledger_;
  core::VmmTracker vmm_;
  core::HostBudget host_budget_{64 * kMiB};
  FakeFacts facts_;
  FakeHostVmmTier tier_;
  VmmSpill placement_{config_, ledger_, vmm_, host_budget_, facts_, tier_};
  CUmemGenericAllocationHandle handle_ = 0;
};

TEST_F(VmmSpillTest, AutoMakesTheHandleOnTheDevicesNumaNodeWithTheProgramsProperties) {
  CUmemAllocationProp prop = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  prop.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
  ASSERT_EQ(spill(prop), CUDA_SUCCESS);
  EXPECT_EQ(handle_, 0x5000u);
  ASSERT_EQ(tier_.created.size(), 1u);
  const CUmemAllocationProp& made = tier_.created[0];
  EXPECT_EQ(made.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(made.location.id, 1);
  EXPECT_EQ(made.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(made.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  EXPECT_EQ(made.allocFlags.compressionType, CU_MEM_ALLOCATION_COMP_NONE);
  EXPECT_EQ(tier_.created_flags, std::vector<unsigned long long>{0});
  // Host budget, ledger (no device bytes), tracker.
  EXPECT_EQ(host_budget_.used(), 4 * kMiB);
  EXPECT_EQ(recorded().live_bytes, 4 * kMiB);
  EXPECT_EQ(ledger_.snapshot(0).held_bytes, 0u);
  EXPECT_EQ(ledger_.snapshot(0).over_budget_served, 1u);
  EXPECT_EQ(ledger_.find(handle_, KeySpace::kVmmHandle)->route, Route::kSpillVmmHost);
  EXPECT_FALSE(ledger_.find(handle_, KeySpace::kPointer).has_value());
  EXPECT_EQ(vmm_.tracked_handles(), 1u);
  EXPECT_EQ(facts_.host_limit_refreshes, 1);
  EXPECT_NE(log_.text().find("cuMemCreate of 4.0 MiB on device 0 spilled to host-located VMM "
                             "memory on NUMA node 1 (over the device budget)"),
            std::string::npos)
      << log_.text();
}

TEST_F(VmmSpillTest, WithoutANumaNodeTheHandleIsPlainHostMemory) {
  tier_.answer = HostVmmLocation{.kind = Kind::kHost};
  ASSERT_EQ(spill(device_prop(), 4 * kMiB, ""), CUDA_SUCCESS);
  ASSERT_EQ(tier_.created.size(), 1u);
  EXPECT_EQ(tier_.created[0].location.type, CU_MEM_LOCATION_TYPE_HOST);
  // The driver ran out, not the budget: not a refusal of the ledger's.
  EXPECT_EQ(ledger_.snapshot(0).over_budget_served, 0u);
  EXPECT_NE(log_.text().find("spilled to host-located VMM memory (the driver is out of device "
                             "memory)"),
            std::string::npos)
      << log_.text();
}

// No other tier can hold a handle, so `host` and `managed` send it where `auto` does, and say so
// once; `off` refuses it as without the shim.
TEST_F(VmmSpillTest, EveryModeButOffMakesTheHandleHostLocated) {
  for (const SpillMode mode : {SpillMode::kAuto, SpillMode::kTiered, SpillMode::kHost,
                               SpillMode::kManaged, SpillMode::kHost}) {
    config_.mode = mode;
    handle_ = 0;
    EXPECT_EQ(spill(device_prop()), CUDA_SUCCESS) << kSpillModeNames[static_cast<size_t>(mode)];
    EXPECT_NE(handle_, 0u);
  }
  ASSERT_EQ(tier_.created.size(), 5u);
  for (const CUmemAllocationProp& made : tier_.created)
    EXPECT_EQ(made.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(recorded().live_count, 5u);
  const std::string text = log_.text();
  const std::string told =
      "[spill] mode = \"host\" spills pointers only; cuMemCreate handles that do not fit go to "
      "host-located VMM memory on NUMA node 1 instead, the only place off the device a handle "
      "can be mapped (said once)";
  EXPECT_NE(text.find(told), std::string::npos) << text;
  EXPECT_EQ(text.find(told, text.find(told) + 1), std::string::npos) << "said twice: " << text;
  EXPECT_EQ(text.find("mode = \"managed\""), std::string::npos) << "said twice: " << text;
  EXPECT_EQ(text.find("mode = \"auto\""), std::string::npos) << text;
}

TEST_F(VmmSpillTest, OffRefusesTheHandleAsWithoutTheShim) {
  config_.mode = SpillMode::kOff;
  EXPECT_EQ(spill(device_prop(), 4 * kMiB, "cuMemCreate of 4.0 MiB refused: over budget"),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(tier_.location_queries, 0);
  EXPECT_TRUE(tier_.created.empty());
  EXPECT_EQ(host_budget_.used(), 0u);
  EXPECT_EQ(recorded().allocations, 0u);
  EXPECT_NE(log_.text().find("cuMemCreate of 4.0 MiB refused: over budget"), std::string::npos);
  EXPECT_EQ(log_.text().find("spilled"), std::string::npos) << log_.text();
}

// PyTorch's expandable segments ask every handle for GPUDirect RDMA (Note [Host-located VMM
// spills]): the handle spills, made without the flag, and the job is told once.
TEST_F(VmmSpillTest, AHandleForGpuDirectRdmaSpillsWithoutTheFlagAndIsToldOnce) {
  CUmemAllocationProp rdma = device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  rdma.allocFlags.gpuDirectRDMACapable = 1;
  ASSERT_EQ(spill(rdma, 20 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(spill(rdma, 20 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(tier_.created.size(), 2u);
  for (const CUmemAllocationProp& made : tier_.created) {
    EXPECT_EQ(made.allocFlags.gpuDirectRDMACapable, 0);
    EXPECT_EQ(made.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
    EXPECT_EQ(made.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  }
  EXPECT_EQ(rdma.allocFlags.gpuDirectRDMACapable, 1) << "the program's request is its own";
  EXPECT_EQ(host_budget_.used(), 40 * kMiB);
  EXPECT_EQ(recorded().live_count, 2u);
  const std::string text = log_.text();
  const std::string told =
      "warning: cuMemCreate handles that asked for GPUDirect RDMA "
      "(allocFlags.gpuDirectRDMACapable) may live on the host when they do not fit on device 0: "
      "such a handle is host-located VMM memory on NUMA node 1, made without the flag";
  const size_t first = text.find(told);
  EXPECT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(told, first + 1), std::string::npos) << "said twice: " << text;
}

TEST_F(VmmSpillTest, AHandleWithoutRdmaSaysNothingOfIt) {
  ASSERT_EQ(spill(device_prop()), CUDA_SUCCESS);
  EXPECT_EQ(log_.text().find("GPUDirect RDMA"), std::string::npos) << log_.text();
}

TEST_F(VmmSpillTest, WhatTheProgramWouldNoticeStaysOnTheDevice) {
  EXPECT_EQ(spill(device_prop(CU_MEM_HANDLE_TYPE_FABRIC)), CUDA_ERROR_OUT_OF_MEMORY);
  CUmemAllocationProp tile_pool = device_prop();
  tile_pool.allocFlags.usage = CU_MEM_CREATE_USAGE_TILE_POOL;
  EXPECT_EQ(spill(tile_pool), CUDA_ERROR_OUT_OF_MEMORY);
  // POSIX file descriptors need a NUMA node: HOST memory cannot be exported.
  tier_.answer = HostVmmLocation{.kind = Kind::kHost};
  EXPECT_EQ(spill(device_prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(tier_.created.empty());
  EXPECT_EQ(host_budget_.used(), 0u);
  const std::string text = log_.text();
  EXPECT_NE(text.find("over budget cuMemCreate of 4.0 MiB on device 0 not spilled: the program "
                      "asked for exportable handles (requestedHandleTypes 8)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("not spilled: the program asked for a usage of device memory "
                      "(allocFlags.usage 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("not spilled: the program asked for POSIX file descriptor handles, and "
                      "device 0 has host-located VMM memory only outside NUMA nodes"),
            std::string::npos)
      << text;
}

TEST_F(VmmSpillTest, WhatNeverSpillsIsRefusedBeforeTheTierIsAsked) {
  facts_.is_integrated = true;
  EXPECT_EQ(spill(device_prop()), CUDA_ERROR_OUT_OF_MEMORY);
  facts_.is_integrated = false;
  EXPECT_EQ(spill(device_prop(), kMiB - 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(tier_.location_queries, 0);
  const std::string text = log_.text();
  EXPECT_NE(text.find("the device is integrated"), std::string::npos) << text;
  EXPECT_NE(text.find("smaller than [spill] min_size (1.0 MiB)"), std::string::npos) << text;
}

TEST_F(VmmSpillTest, ADeviceWithoutHostVmmMemoryIsSaidSo) {
  tier_.answer = HostVmmLocation{.kind = Kind::kNone};
  EXPECT_EQ(spill(device_prop()), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(spill(device_prop()), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(tier_.location_queries, 1) << "a known answer is kept";
  EXPECT_TRUE(tier_.created.empty());
  EXPECT_NE(log_.text().find("not spilled: device 0 supports no host-located VMM memory (neither "
                             "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED nor "
                             "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)"),
            std::string::npos)
      << log_.text();
}

TEST_F(VmmSpillTest, ALocationQueryTheDriverRefusedIsAskedAgain) {
  tier_.answer = std::nullopt;
  EXPECT_EQ(spill(device_prop()), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(log_.text().find("the driver did not say whether device 0 supports host-located VMM "
                             "memory"),
            std::string::npos);
  tier_.answer = HostVmmLocation{.kind = Kind::kHostNuma, .numa_node = 0};
  EXPECT_EQ(spill(device_prop()), CUDA_SUCCESS);
  EXPECT_EQ(spill(device_prop()), CUDA_SUCCESS);
  EXPECT_EQ(tier_.location_queries, 2);
  EXPECT_EQ(recorded().live_count, 2u);
}

TEST_F(VmmSpillTest, AFullHostLimitIsOutOfMemory) {
  ASSERT_TRUE(host_budget_.try_reserve(62 * kMiB));
  EXPECT_EQ(spill(device_prop()), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(spill(device_prop(), 128 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(tier_.created.empty());
  EXPECT_EQ(host_budget_.used(), 62 * kMiB);
  EXPECT_EQ(recorded().allocations, 0u);
  const std::string text = log_.text();
  EXPECT_NE(text.find("cuMemCreate of 4.0 MiB on device 0 not spilled: the host limit is reached "
                      "(62.0 MiB of 64.0 MiB in use; raise [spill] host_limit, or "
                      "VRAMSPILL_SPILL_HOST_LIMIT)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("the request is larger than the whole host limit (64.0 MiB"),
            std::string::npos)
      << text;
}

TEST_F(VmmSpillTest, ADriverRefusalGivesTheHostBudgetBack) {
  tier_.create_result = CUDA_ERROR_OUT_OF_MEMORY;
  EXPECT_EQ(spill(device_prop()), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(handle_, 0u);
  EXPECT_EQ(host_budget_.used(), 0u);
  EXPECT_EQ(recorded().allocations, 0u);
  EXPECT_EQ(vmm_.tracked_handles(), 0u);
  EXPECT_NE(log_.text().find("not spilled: host-located VMM memory on NUMA node 1: the driver "
                             "refused (error 2)"),
            std::string::npos)
      << log_.text();
}

TEST_F(VmmSpillTest, AFreedSpillGivesItsHostBytesBack) {
  ASSERT_EQ(spill(device_prop()), CUDA_SUCCESS);
  const std::optional<core::Allocation> spilled = ledger_.forget(handle_, KeySpace::kVmmHandle);
  ASSERT_TRUE(spilled.has_value());
  ledger_.release_forgotten(*spilled);
  placement_.freed(*spilled);
  EXPECT_EQ(host_budget_.used(), 0u);
  EXPECT_EQ(recorded().live_bytes, 0u);
  EXPECT_EQ(recorded().peak_live_bytes, 4 * kMiB);
}

TEST(HostVmmTierTest, ADeviceOutOfRangeHasNoHostLocationAndIsNotAsked) {
  FakeHostVmmTier tier;
  EXPECT_EQ(tier.location(-1), HostVmmLocation{});
  EXPECT_EQ(tier.location(64), HostVmmLocation{});
  EXPECT_EQ(tier.location_queries, 0);
  EXPECT_EQ(tier.location(3), (HostVmmLocation{.kind = Kind::kHostNuma, .numa_node = 1}));
  EXPECT_EQ(tier.location(3), (HostVmmLocation{.kind = Kind::kHostNuma, .numa_node = 1}));
  EXPECT_EQ(tier.location_queries, 1);
}

}  // namespace
}  // namespace vramspill::placement
