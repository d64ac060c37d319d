#include "policies/lru.h"

#include <algorithm>

namespace vramspill::policies {

void LruPolicy::do_allocated(BlockId block, uint64_t /*granules*/, bool on_device) {
  // Recency of a new block: Note [LRU recency].
  Entry& entry = entries_[block];
  entry = Entry{Recency{latest_use_, allocations_++, block}, on_device};
  if (on_device) resident_.insert(resident_.end(), entry.recency);  // the newest of all
}

void LruPolicy::do_freed(BlockId block) {
  const auto it = entries_.find(block);
  if (it->second.indexed) resident_.erase(it->second.recency);
  entries_.erase(it);
}

void LruPolicy::do_used(uint64_t sequence, uint32_t /*stream*/, std::span<const BlockId> blocks) {
  latest_use_ = std::max(latest_use_, sequence);
  for (const BlockId block : blocks) {
    Entry& entry = entries_.find(block)->second;
    if (entry.recency.last_use >= sequence) continue;
    if (!entry.indexed) {
      entry.recency.last_use = sequence;
      continue;
    }
    // Re-key the set's node in place: no allocation on the launch path. Launches come in
    // sequence order, so the block is usually the newest and the hint makes the insert O(1).
    auto node = resident_.extract(entry.recency);
    entry.recency.last_use = sequence;
    node.value() = entry.recency;
    resident_.insert(resident_.end(), std::move(node));
  }
}

void LruPolicy::do_moved(BlockId block, uint64_t device_granules) {
  Entry& entry = entries_.find(block)->second;
  const bool resident = device_granules > 0;
  if (resident == entry.indexed) return;
  if (resident) {
    resident_.insert(entry.recency);
  } else {
    resident_.erase(entry.recency);
  }
  entry.indexed = resident;
}

std::vector<BlockId> LruPolicy::do_choose_victims(uint64_t granules_needed,
                                                  std::span<const BlockId> keep) {
  std::vector<BlockId> kept(keep.begin(), keep.end());
  std::ranges::sort(kept);
  std::vector<BlockId> victims;
  uint64_t granules = 0;
  for (auto it = resident_.begin(); it != resident_.end() && granules < granules_needed; ++it) {
    if (std::ranges::binary_search(kept, it->block)) continue;
    victims.push_back(it->block);
    granules += device_granules(it->block);
  }
  return victims;
}

bool LruPolicy::do_should_promote(BlockId block) { return granules(block) <= capacity_granules(); }

}  // namespace vramspill::policies
