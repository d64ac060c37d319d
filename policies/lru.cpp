#include "policies/lru.h"

#include <algorithm>

namespace vramspill::policies {

void LruPolicy::do_allocated(BlockId block, uint64_t /*granules*/, bool on_device) {
  // Recency of a new block: Note [LRU recency].
  index_.add(block, Recency{latest_use_, allocations_++}, on_device);
}

void LruPolicy::do_freed(BlockId block) { index_.remove(block); }

void LruPolicy::do_used(uint64_t sequence, uint32_t /*stream*/, std::span<const BlockId> blocks) {
  latest_use_ = std::max(latest_use_, sequence);
  for (const BlockId block : blocks) {
    if (index_.rank(block).last_use >= sequence) continue;  // a late report, or a repeat
    index_.rerank(block, [&](Recency& recency) { recency.last_use = sequence; });
  }
}

void LruPolicy::do_moved(BlockId block, uint64_t device_granules) {
  index_.set_resident(block, device_granules > 0);
}

std::vector<BlockId> LruPolicy::do_choose_victims(uint64_t granules_needed,
                                                  std::span<const BlockId> keep) {
  return index_.first(granules_needed, keep, [&](BlockId b) { return device_granules(b); });
}

bool LruPolicy::do_should_promote(BlockId block) { return granules(block) <= capacity_granules(); }

}  // namespace vramspill::policies
