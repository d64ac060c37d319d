// lfu: evict the blocks used least often lately (a use count that halves every kHalfLife
// launches); promote a block that fits the budget once it has been used in about two launches
// lately.
//
// Note [LFU decayed count]
// A block's count is the sum over its uses of 2^-(age / kHalfLife), its age being how many
// launches ago (by sequence number) the use was: a use now counts 1, a use kHalfLife launches ago
// counts 1/2. So a block used in every step stays although another was used since (what lru gets
// wrong on a step that touches a big block once), and an old favourite that is no longer used
// fades and goes (what pure LFU gets wrong). Ties go by last use, then allocation, as in lru.
// Halving every count each kHalfLife launches would be O(n) work; instead each block keeps
//   score = log2(count) + (now / kHalfLife),
// which does not change while the block is not used (its count halves as `now` grows by
// kHalfLife), so the order of blocks only changes for the blocks a launch touches. A use at
// sequence t adds 2^(t / kHalfLife) to 2^score: score' = max + log2(1 + 2^(min - max)) of score
// and t / kHalfLife, the same (up to rounding) whatever order launches are reported in. A new
// block placed on the device counts as used once by the latest launch, so that it is not the
// first victim before the launch it was allocated for runs; so does one that reaches the device
// before its first use (the tiered layer and the replay allocate on the host, then move in what
// fits). One placed on the host counts nothing until a launch uses it: it is no victim, and its
// allocation is no use. Doubles are exact enough: scores grow by 1 per kHalfLife launches, so
// 2^40 launches leave 2^-22 of resolution.
// Promotion admits by frequency: a block on the host is brought in once its count reaches 1.5
// (used by two launches within about kHalfLife), so a block a job touches once (streamed
// weights, a one-off pass) is reached in place and does not evict blocks in use.
// Costs: `used` O(log n) per touched block (a launch reported after a later one also searches
// itself for repeated names: O(k) more per block of its k), `moved` O(log n), a search
// O((victims + keep) log keep) (policies/ranked_index.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "policies/eviction_policy.h"
#include "policies/ranked_index.h"

namespace vramspill::policies {

class LfuPolicy final : public EvictionPolicy {
 public:
  static constexpr std::string_view kName = "lfu";
  // Launches after which a use counts half (Note [LFU decayed count]): a few training steps'
  // worth of launches for a small model, a fraction of one for a large one.
  static constexpr uint64_t kHalfLife = 1024;

  explicit LfuPolicy(const PolicyOptions& options) noexcept : EvictionPolicy(options) {}

 private:
  struct Rank {
    double score = 0;  // Note [LFU decayed count]
    uint64_t last_use = 0;
    uint64_t allocation = 0;  // allocation order, unique: breaks ties
    // The lowest count first, then the least recent, then the oldest allocation.
    bool operator<(const Rank& other) const noexcept {
      return std::tie(score, last_use, allocation) <
             std::tie(other.score, other.last_use, other.allocation);
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
