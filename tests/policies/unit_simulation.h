// The unit-sized model of policies/belady.h, run through a real policy: `blocks` blocks of one
// granule, all host-located at first, a device of `capacity` granules. Each launch is reported
// (used), then each of its blocks that is not on the device is a miss and is brought in, making
// room with the victims the policy chooses (never one the launch keeps).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "policies/eviction_policy.h"

namespace vramspill::policies {

using Launches = std::vector<std::vector<BlockId>>;

inline uint64_t simulate_unit_misses(EvictionPolicy& policy, uint64_t blocks, uint64_t capacity,
                                     const Launches& launches) {
  for (BlockId block = 0; block < blocks; ++block) policy.allocated(block, 1, false);
  std::set<BlockId> device;
  uint64_t misses = 0;
  uint64_t sequence = 0;
  for (const std::vector<BlockId>& launch : launches) {
    policy.used(++sequence, 0, launch);
    for (const BlockId block : launch) {
      if (device.contains(block)) continue;
      ++misses;
      if (device.size() == capacity) {
        const Victims victims = policy.choose_victims(1, launch);
        EXPECT_TRUE(victims.enough) << "launch " << sequence;
        for (const BlockId victim : victims.blocks) {
          EXPECT_EQ(device.erase(victim), 1u) << "victim " << victim << " was not on the device";
          policy.moved(victim, 0);
        }
      }
      device.insert(block);
      policy.moved(block, 1);
    }
  }
  return misses;
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
