// What the admission flow's tests share (placement/admission_flow.h): tiered mode's seam as a
// test sets it, and the flow over the real ledger, spill placement and VMM spill with fake tiers,
// driver facts and pools.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/vmm_tracker.h"
#include "placement/admission_flow.h"
#include "placement_fakes.h"
#include "pool_fakes.h"

namespace vramspill::placement {

// Tiered mode as a test sets it: the room its arena holds (taken from the ledger, as the arena
// takes it), as much of it given back as is asked for, and the blocks it was asked to free.
class FakeTieredSeam final : public TieredSeam {
 public:
  explicit FakeTieredSeam(core::Ledger& ledger) : ledger_(ledger) {}

  void hold(uint64_t bytes) {
    ASSERT_TRUE(ledger_.take(0, bytes));
    held_ += bytes;
  }

  int room_requests = 0;
  std::vector<CUdeviceptr> freed;

  bool make_device_room(int device, uint64_t bytes) noexcept override {
    ++room_requests;
    if (held_ < bytes) return false;
    ledger_.give(device, bytes);
    held_ -= bytes;
    return true;
  }
  std::vector<CUdeviceptr> lost;
  bool forget_lost_block(const core::Allocation& block) noexcept override {
    lost.push_back(block.key);
    return true;
  }
  CUresult free_block(const core::Allocation& block, std::optional<CUstream>) noexcept override {
    freed.push_back(block.key);
    return CUDA_SUCCESS;
  }

 private:
  core::Ledger& ledger_;
  uint64_t held_ = 0;
};

// Device 0 with a 64 MiB budget, auto mode, [spill] min_size 1 MiB.
class AdmissionFlowFixture : public ::testing::Test {
 protected:
  static constexpr uint64_t kMiB = uint64_t{1} << 20;

  void SetUp() override {
    config_.mode = SpillMode::kAuto;
    config_.min_size = kMiB;
    ledger_.set_device(0, 1024 * kMiB, 64 * kMiB);
  }

  LogCapture log_;
  SpillConfig config_;
  core::Ledger ledger_;
  core::HostBudget host_budget_{256 * kMiB};
  core::VmmTracker vmm_;
  FakeFacts facts_;
  FakeTier managed_{"managed memory", core::Route::kSpillManaged, 0x100000000};
  FakeTier host_{"the pinned host pool", core::Route::kSpillHost, 0x200000000};
  FakeHostVmmTier host_vmm_;
  SpillPlacement spill_{config_, ledger_, host_budget_, facts_, managed_, host_};
  VmmSpill vmm_spill_{config_, ledger_, vmm_, host_budget_, facts_, host_vmm_};
  FakePoolQueries pool_queries_;
  PoolBooks pools_{pool_queries_};
  FakeTieredSeam tiered_{ledger_};
  FakePoolDriver pool_driver_;
  AdmissionFlow flow_{config_, ledger_, pools_, pool_driver_, spill_, vmm_spill_, tiered_};
};

}  // namespace vramspill::placement
