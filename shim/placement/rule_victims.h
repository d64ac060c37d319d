// [[tiered.rule]] actions as both movers read them (Note [Rules before the policy] in
// placement/tiered_placement.h): a block's rule, and in a victim search the blocks the rules give
// first and those no choice may name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "config/config.h"
#include "policies/eviction_policy.h"

namespace vramspill::placement {

// What the rule of `block` says, if one matched it; `ruled`: the live blocks a rule matched.
inline std::optional<RuleAction> rule_of(const std::map<policies::BlockId, RuleAction>& ruled,
                                         policies::BlockId block) {
  const auto found = ruled.find(block);
  if (found == ruled.end()) return std::nullopt;
  return found->second;
}

struct RuledVictims {
  // evict_first blocks with device granules, in address order, until `granules` are covered.
  std::vector<policies::BlockId> first;
  uint64_t covered = 0;  // their device granules
  // `keep`, the pinned blocks and `first`: what the policy may not choose for the rest.
  std::vector<policies::BlockId> keep;
};

// `ruled`: the live blocks a rule matched; `device_granules(block)`: its granules on the device.
template <typename DeviceGranules>
RuledVictims victims_by_rule(const std::map<policies::BlockId, RuleAction>& ruled,
                             std::span<const policies::BlockId> keep, uint64_t granules,
                             DeviceGranules device_granules) {
  RuledVictims victims;
  victims.keep.assign(keep.begin(), keep.end());
  for (const auto& [block, action] : ruled) {
    if (action == RuleAction::kPin) {
      victims.keep.push_back(block);
      continue;
    }
    if (action != RuleAction::kEvictFirst || victims.covered >= granules ||
        std::ranges::find(keep, block) != keep.end())
      continue;
    const uint64_t on_device = device_granules(block);
    if (on_device == 0) continue;
    victims.first.push_back(block);
    victims.keep.push_back(block);  // chosen already: not the policy's to choose again
    victims.covered += on_device;
  }
  return victims;
}

}  // namespace vramspill::placement
