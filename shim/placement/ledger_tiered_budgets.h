// Tiered placement's budgets (placement/tiered_placement.h, Note [Tiered budgets]) as the shim
// keeps them: device granules in the ledger, beside every other route's bytes, so cuMemGetInfo,
// refusals and the exit summary count them; host granules in the host budget that the spill
// tiers share, under [spill] host_limit.
#pragma once

#include <cstdint>

#include "core/host_budget.h"
#include "core/ledger.h"
#include "placement/pool_books.h"
#include "placement/tiered_placement.h"

namespace vramspill::placement {

class LedgerTieredBudgets final : public TieredBudgets {
 public:
  // `pools`: the stream-ordered pools whose figures the ledger holds (none in tests without them).
  LedgerTieredBudgets(core::Ledger& ledger, core::HostBudget& host,
                      PoolBooks* pools = nullptr) noexcept
      : ledger_(ledger), host_(host), pools_(pools) {}

  uint64_t device_room(int device) noexcept override { return ledger_.room(device); }
  bool take_device(int device, uint64_t bytes) noexcept override {
    return ledger_.take(device, bytes);
  }
  void give_device(int device, uint64_t bytes) noexcept override { ledger_.give(device, bytes); }
  bool take_host(uint64_t bytes) noexcept override { return host_.try_reserve(bytes); }
  void give_host(uint64_t bytes) noexcept override { host_.release(bytes); }
  void read_device_figures_again(int /*device*/) noexcept override {
    if (pools_ != nullptr) pools_->refresh(ledger_);  // every pool's: they are few
  }

 private:
  core::Ledger& ledger_;
  core::HostBudget& host_;
  PoolBooks* pools_;
};

}  // namespace vramspill::placement
