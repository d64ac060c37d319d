// The books of a policy that ranks blocks (every one so far): every live block's rank, and the
// blocks holding device granules ordered by it, first victim first. A block on the host keeps its
// rank outside the order, so a victim search never steps over host-resident blocks. Each
// operation costs O(log n) (plus the hash lookup); a search O((victims + keep) log keep).
//
// `Rank` is ordered by operator< and unique per block (each policy ends it with a number it gives
// each block in turn), so the order is total and the same events give the same victims.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policies/eviction_policy.h"

namespace vramspill::policies {

template <typename Rank>
class RankedIndex {
 public:
  // Adds all of it or, on a bad_alloc, nothing.
  void add(BlockId block, const Rank& rank, bool resident) {
    const auto entry = entries_.insert_or_assign(block, Entry{rank, resident}).first;
    if (!resident) return;
    try {
      order_.emplace(rank, block);
    } catch (...) {
      entries_.erase(entry);
      throw;
    }
  }

  void remove(BlockId block) {
    const auto it = entries_.find(block);
    if (it->second.resident) order_.erase(it->second.rank);
    entries_.erase(it);
  }

  const Rank& rank(BlockId block) const { return entries_.find(block)->second.rank; }
  bool resident(BlockId block) const { return entries_.find(block)->second.resident; }

  // Lets `change` edit the block's rank, and moves it in the order. The order's node is reused:
  // no allocation on the launch path. A use usually makes a block the last victim of all (lru:
  // the most recent), so the insert is hinted with the end: amortised O(1) then.
  template <typename Change>
  void rerank(BlockId block, Change change) {
    Entry& entry = entries_.find(block)->second;
    if (!entry.resident) return change(entry.rank);
    auto node = order_.extract(entry.rank);
    change(entry.rank);
    node.key() = entry.rank;
    order_.insert(order_.end(), std::move(node));
  }

  // The block now holds device granules (true) or none.
  void set_resident(BlockId block, bool resident) {
    Entry& entry = entries_.find(block)->second;
    if (resident == entry.resident) return;
    if (resident) {
      order_.emplace(entry.rank, block);
    } else {
      order_.erase(entry.rank);
    }
    entry.resident = resident;
  }

  // The first blocks in rank order, none in `keep`, until they hold `granules_needed` device
  // granules (`device_granules(block)` says how many each holds), or all there are.
  template <typename DeviceGranules>
  std::vector<BlockId> first(uint64_t granules_needed, std::span<const BlockId> keep,
                             DeviceGranules device_granules) const {
    std::vector<BlockId> kept(keep.begin(), keep.end());
    std::ranges::sort(kept);
    std::vector<BlockId> blocks;
    uint64_t granules = 0;
    for (auto it = order_.begin(); it != order_.end() && granules < granules_needed; ++it) {
      if (std::ranges::binary_search(kept, it->second)) continue;
      blocks.push_back(it->second);
      granules += device_granules(it->second);
    }
    return blocks;
  }

 private:
  struct Entry {
    Rank rank;
    bool resident = false;  // in order_: holds device granules
  };

  std::unordered_map<BlockId, Entry> entries_;
  std::map<Rank, BlockId> order_;  // blocks holding device granules, first victim first
};

}  // namespace vramspill::policies
