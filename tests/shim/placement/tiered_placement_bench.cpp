// Tiered placement's share of a launch in tiered mode (placement/tiered_placement.h): what
// before_submission() costs for a launch that touches two blocks already on the device, among
// `blocks` tracked ones, so that nothing moves: the devices' list, the arena's lookups, the
// device's mutex, the policy's books (lru) and the settling of the budgets. The arena runs on
// fake VMM calls, and the budgets are the shim's own (the ledger and the host budget). And what
// the tracked window adds to a submission while moves are copied. Not a test: run
// build/tests/shim/placement/vramspill_tiered_placement_bench by hand.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/remap_window.h"
#include "fake_granule_ops.h"
#include "one_arena.h"
#include "placement/ledger_tiered_budgets.h"
#include "placement/tiered_placement.h"

namespace {

using vramspill::placement::OneArena;
using vramspill::placement::TieredPlacement;
using vramspill::tiers::kGranuleBytes;

// The tracked window's answers for blocks nothing else uses: no wait is needed.
class NoQueuedWork final : public vramspill::tiers::QueuedWork {
 public:
  CUresult wait_for(std::span<const uint64_t>, vramspill::tiers::GranuleOps&) noexcept override {
    return CUDA_SUCCESS;
  }
  CUresult order_after(std::span<const uint64_t>, vramspill::tiers::GranuleOps&,
                       uint64_t& since) noexcept override {
    since = 0;
    return CUDA_SUCCESS;
  }
  bool queued_since(uint64_t, uint64_t) noexcept override { return false; }
  bool names_every_use(std::span<const uint64_t>) noexcept override { return true; }
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
    if (placement.allocate(0, kGranuleBytes, &base).result != CUDA_SUCCESS) {
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

// What the tracked window adds to a submission while moves' copies are in flight (Note [Moves
// copied on the stream] in tiers/granule_arena.h): the arena's check of the two
// blocks it touches, neither moving, against `copies` copies in flight (at most 8), each of
// one block. With none in flight the check is one atomic load.
void BM_SubmissionBesideCopies(benchmark::State& state) {
  const auto copies = static_cast<std::size_t>(state.range(0));
  vramspill::tiers::FakeGranuleOps ops;
  vramspill::tiers::GranuleArena arena(ops, {});
  vramspill::core::RemapWindow window;
  std::vector<uint64_t> blocks(copies + 2);
  for (uint64_t& block : blocks) {
    CUdeviceptr base = 0;
    if (arena.allocate(kGranuleBytes, 0, &base) != CUDA_SUCCESS) {
      state.SkipWithError("allocation failed");
      return;
    }
    block = base;
  }
  NoQueuedWork queued;
  for (std::size_t i = 0; i < copies; ++i) {  // the fake's copies never end: all stay in flight
    const vramspill::tiers::GranuleMove promotion{
        .base = blocks[i], .to = vramspill::tiers::GranuleKind::kDevice, .granules = 0};
    if (arena.move_on_stream(std::span(&promotion, 1), window.close(), queued).on_stream != 1) {
      state.SkipWithError("no promotion was copied on the stream");
      return;
    }
  }
  const uint64_t touched[2] = {blocks[copies], blocks[copies + 1]};
  for (auto _ : state) {
    const vramspill::core::RemapWindow::Submission submission = window.enter();
    benchmark::DoNotOptimize(arena.order_after_copies(1, touched, false, false));
  }
  if (!ops.stream_orders().empty()) state.SkipWithError("a stream waited: not what is measured");
}
BENCHMARK(BM_SubmissionBesideCopies)->ArgName("copies")->Arg(0)->Arg(1)->Arg(8);

}  // namespace
