// Every registered policy's cost on the launch path (used, once per launch) and when the budget is
// full (choose_victims), through the public, checking methods, with 10^5 tracked blocks: a large
// model's tensors without a caching allocator. Run vramspill_policy_bench by hand (Release-like
// builds only; --benchmark_filter=lfu for one policy); "Time" is per call.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "policies/registry.h"

namespace vramspill::policies {
namespace {

constexpr uint64_t kBlocks = 100000;
constexpr uint64_t kTouched = 8;  // blocks per launch

struct Loaded {
  std::unique_ptr<EvictionPolicy> policy;
  uint64_t sequence = 0;  // the next launch's: runs share the policy, so recency only grows
};

// kBlocks one-granule blocks on the device, each used once, in id order.
Loaded& loaded(std::string_view name) {
  static std::map<std::string_view, Loaded> policies;
  Loaded& loaded = policies[name];
  if (loaded.policy != nullptr) return loaded;
  loaded.policy = make_policy(name, {kBlocks, InvariantMode::kCountAndDrop}).policy;
  for (BlockId block = 0; block < kBlocks; ++block) {
    loaded.policy->allocated(block, 1, true);
    const std::array<BlockId, 1> launch = {block};
    loaded.policy->used(block + 1, 0, launch);
  }
  loaded.sequence = kBlocks + 1;
  return loaded;
}

// Each launch touches 8 blocks. stride 1: the 8 least recent blocks (for lru, the tree's ends stay
// in cache); a large prime stride: blocks scattered over the table and the tree, as a real
// model's tensors are.
void used(benchmark::State& state, std::string_view name) {
  Loaded& policy = loaded(name);
  const auto stride = static_cast<uint64_t>(state.range(0));
  uint64_t next = 0;
  std::array<BlockId, kTouched> launch{};
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the library idiom
    for (BlockId& block : launch) block = (next++ * stride) % kBlocks;
    policy.policy->used(policy.sequence++, 0, launch);
  }
  state.SetItemsProcessed(state.iterations());
}

// Room for state.range(0) granules while the launch keeps 8 blocks (the highest ids).
void choose_victims(benchmark::State& state, std::string_view name) {
  EvictionPolicy& policy = *loaded(name).policy;
  const auto need = static_cast<uint64_t>(state.range(0));
  std::array<BlockId, kTouched> keep{};
  for (uint64_t i = 0; i < kTouched; ++i) keep[i] = kBlocks - 1 - i;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the library idiom
    benchmark::DoNotOptimize(policy.choose_victims(need, keep));
  }
  state.SetItemsProcessed(state.iterations());
}

// Registered at start-up, one pair per name, so a new policy is measured without touching this.
[[maybe_unused]] const bool kRegistered = [] {
  for (const std::string_view name : policy_names()) {
    const std::string prefix(name);
    benchmark::RegisterBenchmark((prefix + "/used").c_str(), used, name)->Arg(1)->Arg(7919);
    benchmark::RegisterBenchmark((prefix + "/choose_victims").c_str(), choose_victims, name)
        ->Arg(1)
        ->Arg(64)
        ->Arg(1024);
  }
  return true;
}();

}  // namespace
}  // namespace vramspill::policies
