// The unit-sized model of policies/belady.h, run through a real policy: `blocks` blocks of one
// granule, all host-located at first, a device of `capacity` granules. Each launch is reported
// (used), then each of its blocks that is not on the device is a miss and is brought in, making
// room with the victims the policy chooses (never one the launch keeps); optionally, a launch
// that missed also brings in the blocks the policy names ahead.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "policies/eviction_policy.h"

namespace vramspill::policies {

using Launches = std::vector<std::vector<BlockId>>;

struct UnitRun {
  uint64_t misses = 0;   // uses that found their block on the host
  uint64_t fetched = 0;  // blocks brought in: the misses, and those promoted ahead
  uint64_t stops = 0;    // launches that brought anything in
};

// Brings `block` onto the device, evicting the policy's victim when it is full.
inline void bring_in(EvictionPolicy& policy, std::set<BlockId>& device, uint64_t capacity,
                     BlockId block, std::span<const BlockId> keep, uint64_t sequence) {
  if (device.size() == capacity) {
    const Victims victims = policy.choose_victims(1, keep);
    EXPECT_TRUE(victims.enough) << "launch " << sequence;
    for (const BlockId victim : victims.blocks) {
      EXPECT_EQ(device.erase(victim), 1u) << "victim " << victim << " was not on the device";
      policy.moved(victim, 0);
    }
  }
  device.insert(block);
  policy.moved(block, 1);
}

// With `ahead`, a launch that misses also brings in what the policy names ahead (Note [Promoting
// ahead] in eviction_policy.h), keeping the launch's blocks and those named.
inline UnitRun simulate_units(EvictionPolicy& policy, uint64_t blocks, uint64_t capacity,
                              const Launches& launches, bool ahead = false) {
  for (BlockId block = 0; block < blocks; ++block) policy.allocated(block, 1, false);
  std::set<BlockId> device;
  UnitRun run;
  uint64_t sequence = 0;
  for (const std::vector<BlockId>& launch : launches) {
    policy.used(++sequence, 0, launch);
    const uint64_t misses = run.misses;
    for (const BlockId block : launch) {
      if (device.contains(block)) continue;
      ++run.misses;
      ++run.fetched;
      bring_in(policy, device, capacity, block, launch, sequence);
    }
    if (run.misses == misses) continue;
    ++run.stops;
    if (!ahead) continue;
    std::vector<BlockId> keep = launch;
    for (const BlockId block : policy.promote_ahead(0, launch)) {
      keep.push_back(block);
      ++run.fetched;
      bring_in(policy, device, capacity, block, keep, sequence);
    }
  }
  return run;
}

inline uint64_t simulate_unit_misses(EvictionPolicy& policy, uint64_t blocks, uint64_t capacity,
                                     const Launches& launches) {
  return simulate_units(policy, blocks, capacity, launches).misses;
}

// Every use of every launch, in order: the sequence Belady's MIN is run over.
inline std::vector<BlockId> flatten(const Launches& launches) {
  std::vector<BlockId> uses;
  for (const std::vector<BlockId>& launch : launches) {
    uses.insert(uses.end(), launch.begin(), launch.end());
  }
  return uses;
}

}  // namespace vramspill::policies
