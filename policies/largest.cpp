#include "policies/largest.h"

#include <algorithm>

namespace vramspill::policies {

void LargestPolicy::do_allocated(BlockId block, uint64_t granules, bool on_device) {
  // A new block is as recent as the latest launch, as in lru (Note [LRU recency] in lru.h).
  index_.add(block, Rank{on_device ? granules : 0, latest_use_, allocations_++}, on_device);
}

void LargestPolicy::do_freed(BlockId block) { index_.remove(block); }

void LargestPolicy::do_used(uint64_t sequence, uint32_t /*stream*/,
                            std::span<const BlockId> blocks) {
  latest_use_ = std::max(latest_use_, sequence);
  for (const BlockId block : blocks) {
    if (index_.rank(block).last_use >= sequence) continue;  // a late report, or a repeat
    index_.rerank(block, [&](Rank& rank) { rank.last_use = sequence; });
  }
}

void LargestPolicy::do_moved(BlockId block, uint64_t device_granules) {
  if (index_.rank(block).device_granules != device_granules) {
    index_.rerank(block, [&](Rank& rank) { rank.device_granules = device_granules; });
  }
  index_.set_resident(block, device_granules > 0);
}

std::vector<BlockId> LargestPolicy::do_choose_victims(uint64_t granules_needed,
                                                      std::span<const BlockId> keep) {
  return index_.first(granules_needed, keep, [&](BlockId b) { return device_granules(b); });
}

bool LargestPolicy::do_should_promote(BlockId block) {
  return 2 * granules(block) <= capacity_granules();  // Note [Largest first]
}

}  // namespace vramspill::policies
