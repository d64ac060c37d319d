// Tiered placement over device 0's arena on fake VMM calls, charged to the shim's own budgets (the
// ledger and the host budget) and deciding with the real lru, whose decisions abort at the first
// broken invariant, beside a prefetch mover that can serve no device: what the tests of the
// layers above tiered placement build on.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "../tiers/fake_granule_ops.h"
#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/remap_window.h"
#include "core/use_tracker.h"
#include "one_arena.h"
#include "placement/ledger_tiered_budgets.h"
#include "placement/prefetch_placement.h"
#include "placement/tiered_placement.h"

namespace vramspill::placement {

// No device the prefetch mover can serve (as without concurrent managed access).
class NoPrefetchDevices final : public PrefetchDevices {
 public:
  tiers::PrefetchOps* ops(int) noexcept override { return nullptr; }
  core::CaptureGate::Hold hold_if_may_move() noexcept override { return {}; }
};

struct TieredOnFakeVmm {
  // Device 0 with 64 granules and a budget of 8; a host limit of 64.
  TieredOnFakeVmm() { ledger.set_device(0, 64 * tiers::kGranuleBytes, 8 * tiers::kGranuleBytes); }
  TieredOnFakeVmm(const TieredOnFakeVmm&) = delete;
  TieredOnFakeVmm& operator=(const TieredOnFakeVmm&) = delete;

  // For a test's TearDown().
  void expect_consistent_arena() const {
    std::string problem;
    EXPECT_TRUE(arena.check_invariants(&problem)) << problem;
  }

  core::Ledger ledger;
  core::HostBudget host_budget{64 * tiers::kGranuleBytes};
  LedgerTieredBudgets budgets{ledger, host_budget};
  tiers::FakeGranuleOps ops;
  tiers::GranuleArena arena{ops, tiers::ArenaOptions{}};
  OneArena arenas{arena};
  core::RemapWindow window;
  core::UseTracker use;
  TieredPlacement placement{budgets,
                            arenas,
                            window,
                            {.policy = "lru", .invariant_mode = policies::InvariantMode::kAbort},
                            &use};
  NoPrefetchDevices no_prefetch_devices;
  PrefetchPlacement prefetch{budgets, no_prefetch_devices, {.policy = "lru"}};
};

}  // namespace vramspill::placement
