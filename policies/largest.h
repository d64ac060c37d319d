// largest: evict the blocks holding the most device granules first (ties: least recently used,
// then older allocation); promote a block only if it fits in half the budget.
//
// Note [Largest first]
// Each move costs a remap window, a device-wide synchronisation, whatever it carries, so when the
// job's blocks differ in size the number of moves counts as much as the bytes. Taking the largest
// evictable blocks first meets any need with the fewest victims: no k blocks hold more than the k
// largest. A need the largest block covers costs one move, and the granules it frees beyond the
// need leave room for the next ones. Among blocks of one size (the common case of a model's
// equal layers) the order is lru's (Note [LRU recency] in lru.h).
// A block larger than half the budget is never promoted: once in, it would be the largest block
// on the device (the others hold less than half together), so the next need would evict it again
// first; it is touched in place instead.
// Costs: `used` O(log n) per touched block that holds device granules (its rank has its recency),
// `moved` O(log n), a search O((victims + keep) log keep) (policies/ranked_index.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "policies/eviction_policy.h"
#include "policies/ranked_index.h"

namespace vramspill::policies {

class LargestPolicy final : public EvictionPolicy {
 public:
  static constexpr std::string_view kName = "largest";

  explicit LargestPolicy(const PolicyOptions& options) noexcept : EvictionPolicy(options) {}

 private:
  struct Rank {
    uint64_t device_granules = 0;
    uint64_t last_use = 0;
    uint64_t allocation = 0;  // allocation order, unique: breaks ties
    // The most device granules first, then the least recent, then the oldest allocation.
    bool operator<(const Rank& other) const noexcept {
      return std::tie(other.device_granules, last_use, allocation) <
             std::tie(device_granules, other.last_use, other.allocation);
    }
  };

  std::string_view do_name() const noexcept override { return kName; }
  void do_allocated(BlockId block, uint64_t granules, bool on_device) override;
  void do_freed(BlockId block) override;
  void do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) override;
  void do_moved(BlockId block, uint64_t device_granules) override;
  std::vector<BlockId> do_choose_victims(uint64_t granules_needed,
                                         std::span<const BlockId> keep) override;
  bool do_should_promote(BlockId block) override;

  RankedIndex<Rank> index_;
  uint64_t latest_use_ = 0;
  uint64_t allocations_ = 0;
};

}  // namespace vramspill::policies
