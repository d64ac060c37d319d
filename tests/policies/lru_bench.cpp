// lru's cost on the launch path (used, once per launch) and when the budget is full
// (choose_victims), through the public, checking methods, with 10^5 tracked blocks: a large
// model's tensors without a caching allocator. Run vramspill_lru_bench by hand (Release-like
// builds only); "Time" is per call.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>

#include "policies/lru.h"

namespace vramspill::policies {
namespace {

constexpr uint64_t kBlocks = 100000;
constexpr uint64_t kTouched = 8;  // blocks per launch

// kBlocks one-granule blocks on the device, each used once, in id order.
LruPolicy& loaded_lru() {
  static LruPolicy* const lru = [] {
    auto* created = new LruPolicy({kBlocks, InvariantMode::kCountAndDrop});
    for (BlockId block = 0; block < kBlocks; ++block) {
      created->allocated(block, 1, true);
      const std::array<BlockId, 1> launch = {block};
      created->used(block + 1, 0, launch);
    }
    return created;
  }();
  return *lru;
}

// Each launch touches 8 blocks, and every use moves its block from the oldest end of the index
// to the newest. stride 1: the 8 least recent blocks (the tree's ends stay in cache); a large
// prime stride: blocks scattered over the table and the tree, as a real model's tensors are.
void BM_LruUsed(benchmark::State& state) {
  LruPolicy& lru = loaded_lru();
  const auto stride = static_cast<uint64_t>(state.range(0));
  static uint64_t sequence = kBlocks + 1;  // runs share the policy: recency only grows
  uint64_t next = 0;
  std::array<BlockId, kTouched> launch{};
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the library idiom
    for (BlockId& block : launch) block = (next++ * stride) % kBlocks;
    lru.used(sequence++, 0, launch);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LruUsed)->Arg(1)->Arg(7919);

// Room for state.range(0) granules while the launch keeps its 8 blocks (the most recent ones).
void BM_LruChooseVictims(benchmark::State& state) {
  LruPolicy& lru = loaded_lru();
  const auto need = static_cast<uint64_t>(state.range(0));
  std::array<BlockId, kTouched> keep{};
  for (uint64_t i = 0; i < kTouched; ++i) keep[i] = kBlocks - 1 - i;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the library idiom
    benchmark::DoNotOptimize(lru.choose_victims(need, keep));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LruChooseVictims)->Arg(1)->Arg(64)->Arg(1024);

}  // namespace
}  // namespace vramspill::policies
