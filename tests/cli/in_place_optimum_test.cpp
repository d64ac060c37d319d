// MIN with in-place access (tools/cli/in_place_optimum.h): the cost of Note [The in-place
// optimum] on hand-built steps, the flow against every schedule of the relaxation on small
// random inputs, and the bound below every policy's link granules.
#include "in_place_optimum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "policies/registry.h"
#include "trace_replay.h"

namespace vramspill::cli {
namespace {

ReplayStep alloc(uint64_t block, uint64_t granules) {
  return {.kind = ReplayStep::Kind::kAlloc, .stream = 0, .blocks = {block}, .granules = granules};
}

ReplayStep use(std::vector<uint64_t> blocks) {
  return {.kind = ReplayStep::Kind::kUse, .stream = 0, .blocks = std::move(blocks), .granules = 0};
}

ReplayStep free_of(uint64_t block) {
  return {.kind = ReplayStep::Kind::kFree, .stream = 0, .blocks = {block}, .granules = 0};
}

ReplayInput steps(uint64_t budget, std::vector<ReplayStep> all) {
  ReplayInput input;
  input.budget_granules = budget;
  input.steps = std::move(all);
  return input;
}

TEST(InPlaceOptimum, ABlockThatStaysCrossesNothingAndOneThatCannotCrossesAtEveryUse) {
  const std::vector<ReplayStep> three_uses = {alloc(0, 2), use({0}), use({0}), use({0})};
  EXPECT_EQ(in_place_optimum_granules(steps(2, three_uses)), 0u);  // created on the device
  EXPECT_EQ(in_place_optimum_granules(steps(0, three_uses)), 6u);  // each use reads 2 granules
  // With room for one granule of two, that one stays: the other crosses at every use.
  EXPECT_EQ(in_place_optimum_granules(steps(1, three_uses)), 3u);
}

TEST(InPlaceOptimum, DataUsedOnceAStepIsReadInPlaceNotMovedInAndOut) {
  // Room for one granule. 0 is used at every launch, 1 and 2 once each between them: keeping 0
  // costs 1 and 2 one crossing each; moving them in would cost a fetch and a write-back of 0.
  const ReplayInput input = steps(
      1, {alloc(0, 1), alloc(1, 1), alloc(2, 1), use({0}), use({1}), use({0}), use({2}), use({0})});
  EXPECT_EQ(in_place_optimum_granules(input), 2u);
}

TEST(InPlaceOptimum, AFreedBlockIsNeverWrittenBack) {
  // 0 is freed after its uses: held to its free, it crosses nothing; 1, allocated on the host
  // after, is held from then on.
  const ReplayInput input =
      steps(1, {alloc(0, 1), use({0}), use({0}), free_of(0), alloc(1, 1), use({1}), use({1})});
  EXPECT_EQ(in_place_optimum_granules(input), 0u);
}

// The relaxation's optimum by brute force over one-granule blocks: every choice of the gaps
// held on the device that fits the budget at every step, each use costing 1 - before * after.
uint64_t brute_force(const ReplayInput& input) {
  struct Gap {
    uint64_t block;
    std::size_t leaves;   // the step after whose event it starts
    std::size_t arrives;  // the step of the event that ends it (steps.size(): the end)
  };
  std::vector<Gap> gaps;
  std::vector<std::pair<std::size_t, std::size_t>> uses;  // (gap before, gap after)
  std::vector<std::size_t> open(input.blocks, SIZE_MAX);  // block -> its open gap
  for (std::size_t step = 0; step < input.steps.size(); ++step) {
    const ReplayStep& at = input.steps[step];
    for (const uint64_t block : at.blocks) {
      const std::size_t before = open[block];
      if (before != SIZE_MAX) gaps[before].arrives = step;
      open[block] = SIZE_MAX;
      if (at.kind == ReplayStep::Kind::kFree) continue;
      open[block] = gaps.size();
      gaps.push_back({block, step, input.steps.size()});
      if (at.kind == ReplayStep::Kind::kUse) uses.emplace_back(before, open[block]);
    }
  }
  uint64_t best = UINT64_MAX;
  for (uint64_t held = 0; held < (uint64_t{1} << gaps.size()); ++held) {
    const auto is_held = [&](std::size_t gap) { return (held >> gap & 1) != 0; };
    bool fits = true;
    for (std::size_t step = 0; step <= input.steps.size() && fits; ++step) {
      uint64_t holding = 0;
      for (std::size_t gap = 0; gap < gaps.size(); ++gap)
        holding += is_held(gap) && gaps[gap].leaves < step && step <= gaps[gap].arrives;
      fits = holding <= input.budget_granules;
    }
    if (!fits) continue;
    uint64_t cost = 0;
    for (const auto& [before, after] : uses) cost += is_held(before) && is_held(after) ? 0 : 1;
    best = std::min(best, cost);
  }
  return best;
}

// Random launches over one-granule blocks, some freed and allocated again on the way.
ReplayInput random_input(std::mt19937_64& random, uint64_t max_gaps) {
  ReplayInput input;
  input.budget_granules = random() % 3;
  std::vector<uint64_t> live;
  uint64_t gaps = 0;
  while (gaps < max_gaps) {
    const uint64_t choice = random() % 8;
    if (live.size() < 2 || choice == 0) {
      live.push_back(input.blocks);
      input.steps.push_back(alloc(input.blocks++, 1));
      ++gaps;
    } else if (choice == 1 && live.size() > 2) {
      input.steps.push_back(free_of(live.front()));
      live.erase(live.begin());
    } else {
      std::vector<uint64_t> launch = {live[random() % live.size()]};
      if (choice < 4) launch.push_back(live[random() % live.size()]);
      if (launch.size() == 2 && launch[0] == launch[1]) launch.pop_back();
      gaps += launch.size();
      input.steps.push_back(use(std::move(launch)));
    }
  }
  return input;
}

TEST(InPlaceOptimum, IsTheRelaxationsOptimumOnSmallRandomInputs) {
  std::mt19937_64 random(23);
  for (int trial = 0; trial < 200; ++trial) {
    const ReplayInput input = random_input(random, 12);
    EXPECT_EQ(in_place_optimum_granules(input), brute_force(input)) << "trial " << trial;
  }
}

TEST(InPlaceOptimum, NoPolicyCrossesTheLinkLessThanTheBound) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 40; ++trial) {
    ReplayInput input;
    input.budget_granules = 2 + random() % 12;
    for (uint64_t block = 0; block < 10; ++block)
      input.steps.push_back(alloc(block, 1 + random() % 6));
    input.blocks = 10;
    for (int launch = 0; launch < 80; ++launch) {
      std::vector<uint64_t> blocks;
      for (uint64_t count = 1 + random() % 3; count > 0; --count) blocks.push_back(random() % 10);
      input.steps.push_back(use(std::move(blocks)));
    }
    const uint64_t bound = in_place_optimum_granules(input);
    for (const std::string_view name : policies::policy_names()) {
      EXPECT_GE(replay(input, name).link_granules(), bound) << name << ", trial " << trial;
    }
  }
}

}  // namespace
}  // namespace vramspill::cli
