// The contract every registered policy keeps (policies/README.md). Instantiated over
// policy_names(), so a policy added to the registry is held to it without touching this file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "policies/belady.h"
#include "policies/registry.h"
#include "unit_simulation.h"

namespace vramspill::policies {
namespace {

class PolicyContract : public ::testing::TestWithParam<std::string_view> {
 protected:
  // The project's tests abort at the first broken contract (Note [Decisions are checked]).
  std::unique_ptr<EvictionPolicy> make(uint64_t capacity,
                                       InvariantMode mode = InvariantMode::kAbort) const {
    MadePolicy made = make_policy(GetParam(), {capacity, mode});
    EXPECT_NE(made.policy, nullptr) << made.error;
    return std::move(made.policy);
  }
};

// What the caller knows of each block, kept apart from the policy's own books.
struct Block {
  uint64_t granules = 0;
  uint64_t device = 0;
};

// Drives a policy as the tiered layer would, with random allocations, frees, launches,
// promotions and partial moves, checks every decision against the test's own books, and returns
// every decision in order (for the determinism test).
std::vector<uint64_t> run_random_events(EvictionPolicy& policy, uint64_t capacity, uint64_t seed) {
  std::mt19937_64 random(seed);
  const auto below = [&](uint64_t n) { return random() % n; };
  std::map<BlockId, Block> blocks;
  uint64_t on_device = 0;
  BlockId next_id = 1;
  std::vector<uint64_t> decisions;

  // Asks for room, checks the answer, and (when it is enough) evicts the victims.
  const auto make_room = [&](uint64_t need, const std::vector<BlockId>& keep) {
    const Victims victims = policy.choose_victims(need, keep);
    std::set<BlockId> distinct;
    uint64_t granules = 0;
    for (const BlockId victim : victims.blocks) {
      EXPECT_TRUE(distinct.insert(victim).second) << "victim " << victim << " named twice";
      EXPECT_TRUE(blocks.contains(victim)) << "victim " << victim << " is not live";
      EXPECT_EQ(std::ranges::count(keep, victim), 0) << "victim " << victim << " is kept";
      EXPECT_GT(blocks[victim].device, 0u) << "victim " << victim << " holds no device granules";
      granules += blocks[victim].device;
      decisions.push_back(victim);
    }
    EXPECT_EQ(victims.granules, granules);
    EXPECT_EQ(victims.enough, granules >= need);
    if (!victims.enough) {
      uint64_t evictable = on_device;
      for (const BlockId kept : std::set<BlockId>(keep.begin(), keep.end())) {
        evictable -= blocks[kept].device;
      }
      EXPECT_LT(evictable, need) << "short although enough was evictable";
      return false;
    }
    for (const BlockId victim : victims.blocks) {
      on_device -= blocks[victim].device;
      blocks[victim].device = 0;
      policy.moved(victim, 0);
    }
    return true;
  };

  for (int step = 0; step < 2000; ++step) {
    const uint64_t kind = below(10);
    if (kind < 3 || blocks.size() < 4) {  // allocate: on the device if room can be made
      const BlockId id = next_id++;
      const uint64_t granules = 1 + below(6);
      const uint64_t free = capacity - on_device;
      const bool device =
          granules <= free || (granules <= capacity && make_room(granules - free, {}));
      blocks[id] = {granules, device ? granules : 0};
      on_device += blocks[id].device;
      policy.allocated(id, granules, device);
    } else if (kind < 4) {  // free
      auto it = std::next(blocks.begin(), static_cast<long>(below(blocks.size())));
      on_device -= it->second.device;
      policy.freed(it->first);
      blocks.erase(it);
    } else {  // a launch of 1..4 blocks, promoting what the policy asks for
      std::vector<BlockId> launch;
      for (uint64_t n = 1 + below(4); n > 0; --n) {
        launch.push_back(std::next(blocks.begin(), static_cast<long>(below(blocks.size())))->first);
      }
      policy.used(static_cast<uint64_t>(step), static_cast<uint32_t>(below(3)), launch);
      for (const BlockId block : launch) {
        Block& b = blocks[block];
        if (b.device == b.granules) continue;
        const bool promote = policy.should_promote(block);
        decisions.push_back(promote ? 1 : 0);
        if (promote) {
          EXPECT_LE(b.granules, capacity) << "promoted a block larger than the budget";
        }
        const uint64_t free = capacity - on_device;
        const uint64_t host = b.granules - b.device;
        if (!promote || (host > free && !make_room(host - free, launch))) continue;
        // Now and then the mover falls short and brings in only part of the block.
        const uint64_t moved_in = below(8) == 0 ? host / 2 : host;
        on_device += moved_in;
        b.device += moved_in;
        policy.moved(block, b.device);
      }
    }
  }
  return decisions;
}

TEST_P(PolicyContract, DecisionsStayValidOnRandomEvents) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const auto policy = make(24);
    const std::vector<uint64_t> decisions = run_random_events(*policy, 24, seed);
    EXPECT_GT(policy->stats().victims_chosen, 0u) << "the stream never asked for room";
    EXPECT_GT(policy->stats().promotions_agreed + policy->stats().promotions_refused, 0u);
    EXPECT_EQ(policy->stats().invalid_decisions, 0u);
    EXPECT_EQ(policy->stats().invalid_events, 0u);
  }
}

// Two fresh policies, so that state a policy keeps outside itself (a static, a global random
// source) shows too.
TEST_P(PolicyContract, SameEventsGiveTheSameDecisions) {
  for (uint64_t seed = 11; seed <= 13; ++seed) {
    const auto first = make(24);
    const auto second = make(24);
    const std::vector<uint64_t> decisions = run_random_events(*first, 24, seed);
    EXPECT_FALSE(decisions.empty());
    EXPECT_EQ(run_random_events(*second, 24, seed), decisions) << "seed " << seed;
  }
}

TEST_P(PolicyContract, NeverEvictsAKeptBlock) {
  const auto policy = make(4);
  for (BlockId block = 1; block <= 4; ++block) policy->allocated(block, 1, true);
  const std::vector<BlockId> keep = {1, 2, 3};
  policy->used(1, 0, keep);
  const Victims victims = policy->choose_victims(2, keep);
  EXPECT_TRUE(std::ranges::all_of(victims.blocks, [](BlockId b) { return b == 4; }));
  EXPECT_FALSE(victims.enough);
  const std::vector<BlockId> all = {1, 2, 3, 4};
  EXPECT_TRUE(policy->choose_victims(1, all).blocks.empty());
}

TEST_P(PolicyContract, FreedBlocksAreForgotten) {
  const auto policy = make(4, InvariantMode::kCountAndDrop);
  for (BlockId block = 1; block <= 3; ++block) policy->allocated(block, 1, true);
  policy->freed(2);
  const std::vector<BlockId> none;
  const Victims victims = policy->choose_victims(2, none);
  EXPECT_EQ(std::ranges::count(victims.blocks, BlockId{2}), 0);
  EXPECT_TRUE(victims.enough);
  EXPECT_EQ(policy->stats().invalid_decisions, 0u);
  // A freed block is unknown to every event, and its id may be allocated again.
  const std::vector<BlockId> launch = {2};
  policy->used(1, 0, launch);
  policy->moved(2, 0);
  EXPECT_EQ(policy->stats().invalid_events, 2u);
  policy->allocated(2, 1, true);
  EXPECT_EQ(policy->stats().invalid_events, 2u);
  EXPECT_EQ(policy->choose_victims(3, none).granules, 3u);
}

// A policy that beats the optimum has an accounting bug (it evicts without being asked, or its
// misses are not what they seem).
TEST_P(PolicyContract, NeverBeatsBeladyOnSmallTraces) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    std::mt19937_64 random(seed);
    const uint64_t blocks = 4 + random() % 9;
    const uint64_t capacity = 2 + random() % (blocks - 2);
    Launches launches(200);
    for (std::vector<BlockId>& launch : launches) {
      // Skewed towards low ids, so that there is something to learn.
      for (uint64_t n = 1 + random() % std::min<uint64_t>(3, capacity); launch.size() < n;) {
        const BlockId block = std::min(random() % blocks, random() % blocks);
        if (std::ranges::count(launch, block) == 0) launch.push_back(block);
      }
    }
    const auto policy = make(capacity);
    const uint64_t misses = simulate_unit_misses(*policy, blocks, capacity, launches);
    const uint64_t optimum = belady_misses(flatten(launches), capacity);
    EXPECT_GE(misses, optimum) << "seed " << seed;
  }
}

std::string test_name(const ::testing::TestParamInfo<std::string_view>& info) {
  std::string name(info.param);
  std::ranges::replace_if(
      name, [](unsigned char c) { return std::isalnum(c) == 0; }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContract, ::testing::ValuesIn(policy_names()),
                         test_name);

}  // namespace
}  // namespace vramspill::policies
