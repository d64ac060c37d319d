// lru: evict the blocks whose last launch is oldest; promote every block that fits the budget.
//
// Note [LRU recency]
// A block's recency is the highest sequence number of a launch that used it; a new block takes
// the highest sequence seen so far, as if just used, so that a block allocated for the next
// launch is not the first victim before that launch runs. Ties (blocks of one launch, blocks
// allocated between two launches) go by allocation order: the older allocation is evicted first.
// Launches reported out of order never make a block look older than it is (the maximum wins).
// Blocks holding device granules are ordered by (recency, allocation) in policies/ranked_index.h,
// so a victim search walks from the oldest without stepping over host-resident blocks: each event
// costs O(log n), amortised O(1) per block for a launch reported in sequence order (the block goes
// to the end of the order, which the insert is hinted with), and a search
// O((victims + keep) log keep).
// A loop over more data than fits the budget evicts each block just before its next use and so
// misses on every use (the classic LRU failure, tests/policies/lru_test.cpp); Belady's MIN
// (policies/belady.h) shows what was possible.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "policies/eviction_policy.h"
#include "policies/ranked_index.h"

namespace vramspill::policies {

class LruPolicy final : public EvictionPolicy {
 public:
  static constexpr std::string_view kName = "lru";

  explicit LruPolicy(const PolicyOptions& options) noexcept : EvictionPolicy(options) {}

  // A block's place in the order (Note [LRU recency]): the lower, the sooner evicted.
  struct Recency {
    uint64_t last_use = 0;
    uint64_t allocation = 0;  // allocation order, unique: breaks ties
    bool operator<(const Recency& other) const noexcept {
      return std::tie(last_use, allocation) < std::tie(other.last_use, other.allocation);
    }
  };

  // A live block's place in the order.
  const Recency& recency(BlockId block) const { return index_.rank(block); }

 private:
  std::string_view do_name() const noexcept override { return kName; }
  void do_allocated(BlockId block, uint64_t granules, bool on_device) override;
  void do_freed(BlockId block) override;
  void do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) override;
  void do_moved(BlockId block, uint64_t device_granules) override;
  std::vector<BlockId> do_choose_victims(uint64_t granules_needed,
                                         std::span<const BlockId> keep) override;
  bool do_should_promote(BlockId block) override;

  RankedIndex<Recency> index_;  // least recent first
  uint64_t latest_use_ = 0;
  uint64_t allocations_ = 0;
};

}  // namespace vramspill::policies
