#include "policies/lfu.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace vramspill::policies {
namespace {

// The score of a block not used yet: log2 of a count of 0, which the first use replaces.
constexpr double kNoUse = -std::numeric_limits<double>::infinity();

// Sequence `t` on the score's scale: log2 of what one use at t adds (Note [LFU decayed count]).
double at(uint64_t sequence) {
  return static_cast<double>(sequence) / static_cast<double>(LfuPolicy::kHalfLife);
}

// log2(2^score + 2^(t / kHalfLife)), without overflowing either power.
double with_use(double score, uint64_t sequence) {
  const double use = at(sequence);
  const auto [low, high] = std::minmax(score, use);
  return high + std::log2(1.0 + std::exp2(low - high));
}

}  // namespace

void LfuPolicy::do_allocated(BlockId block, uint64_t /*granules*/, bool on_device) {
  // Only a block placed on the device counts its allocation as a use (Note [LFU decayed count]).
  index_.add(block, Rank{on_device ? at(latest_use_) : kNoUse, latest_use_, allocations_++},
             on_device);
}

void LfuPolicy::do_freed(BlockId block) { index_.remove(block); }

void LfuPolicy::do_used(uint64_t sequence, uint32_t /*stream*/, std::span<const BlockId> blocks) {
  latest_use_ = std::max(latest_use_, sequence);
  for (auto it = blocks.begin(); it != blocks.end(); ++it) {
    const BlockId block = *it;
    // A block named twice by one launch counts once: the second time, its last use is this
    // launch, unless a later launch was reported first; only then is the launch searched.
    const uint64_t last_use = index_.rank(block).last_use;
    if (last_use == sequence) continue;
    if (last_use > sequence && std::find(blocks.begin(), it, block) != it) continue;
    index_.rerank(block, [&](Rank& rank) {
      rank.score = with_use(rank.score, sequence);
      rank.last_use = std::max(rank.last_use, sequence);
    });
  }
}

void LfuPolicy::do_moved(BlockId block, uint64_t device_granules) {
  // Placed on the device before its first use, as a new block is (Note [LFU decayed count]).
  if (device_granules > 0 && index_.rank(block).score == kNoUse) {
    index_.rerank(block, [&](Rank& rank) { rank.score = at(latest_use_); });
  }
  index_.set_resident(block, device_granules > 0);
}

std::vector<BlockId> LfuPolicy::do_choose_victims(uint64_t granules_needed,
                                                  std::span<const BlockId> keep) {
  return index_.first(granules_needed, keep, [&](BlockId b) { return device_granules(b); });
}

bool LfuPolicy::do_should_promote(BlockId block) {
  // The count now, 2^(score - now / kHalfLife), at least 1.5: Note [LFU decayed count].
  static constexpr double kAdmit = 0.5849625007211562;  // log2(1.5)
  return granules(block) <= capacity_granules() &&
         index_.rank(block).score - at(latest_use_) >= kAdmit;
}

}  // namespace vramspill::policies
