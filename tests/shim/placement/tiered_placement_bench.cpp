// Tiered placement's share of a launch in tiered mode (placement/tiered_placement.h): what
// before_submission() costs for a launch that touches two blocks already on the device, among
// `blocks` tracked ones, so that nothing moves: the devices' list, the arena's lookups, the
// device's mutex, the policy's books (lru) and the settling of the budgets. The arena runs on
// fake VMM calls, and the budgets are the shim's own (the ledger and the host budget). Not a
// test: run build/tests/shim/placement/vramspill_tiered_placement_bench by hand.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/remap_window.h"
#include "fake_granule_ops.h"
#include "placement/ledger_tiered_budgets.h"
#include "placement/tiered_placement.h"

namespace {

using vramspill::placement::TieredPlacement;
using vramspill::tiers::kGranuleBytes;

class OneArena final : public vramspill::placement::ArenaSource {
 public:
  explicit OneArena(vramspill::tiers::GranuleArena& arena) : arena_(arena) {}
  vramspill::tiers::GranuleArena* arena(int device) noexcept override {
    return device == 0 ? &arena_ : nullptr;
  }
  bool may_synchronize() noexcept override { return true; }

 private:
  vramspill::tiers::GranuleArena& arena_;
};

void BM_LaunchTouchingResidentBlocks(benchmark::State& state) {
  const auto count = static_cast<uint64_t>(state.range(0));
  vramspill::tiers::FakeGranuleOps ops;
  vramspill::tiers::GranuleArena arena(ops, {});
  vramspill::core::Ledger ledger;
  ledger.set_device(0, 2 * count * kGranuleBytes, count * kGranuleBytes);
  vramspill::core::HostBudget host(vramspill::core::HostBudget::kUnlimited);
  vramspill::placement::LedgerTieredBudgets budgets(ledger, host);
  OneArena arenas(arena);
  vramspill::core::RemapWindow window;
  TieredPlacement placement(budgets, arenas, window, {.policy = "lru"});
  std::vector<uint64_t> blocks(count);
  for (uint64_t& block : blocks) {
    CUdeviceptr base = 0;
    if (placement.allocate(0, kGranuleBytes, &base) != CUDA_SUCCESS) {
      state.SkipWithError("allocation failed");
      return;
    }
    block = base;
  }
  uint64_t sequence = 0;
  for (auto _ : state) {
    const uint64_t first = sequence % count;
    const uint64_t touched[2] = {blocks[first], blocks[(first + 1) % count]};
    placement.before_submission(++sequence, 1, touched);
  }
  if (placement.stats().windows != 0) state.SkipWithError("a block moved: not what is measured");
}
BENCHMARK(BM_LaunchTouchingResidentBlocks)->ArgName("blocks")->Arg(100)->Arg(1000);

}  // namespace
