#include "placement/promotion_admission.h"

#include <algorithm>
#include <cmath>

namespace vramspill::placement {
namespace {

// What a use `age` launches old counts.
double decay(uint64_t age) {
  return std::exp2(-static_cast<double>(age) / PromotionAdmission::kHalfLife);
}

}  // namespace

double PromotionAdmission::count(uint64_t block, uint64_t now) const {
  const auto found = counts_.find(block);
  if (found == counts_.end()) return 0;
  const Count& count = found->second;
  return count.uses * decay(now - std::min(now, count.at));
}

void PromotionAdmission::used(uint64_t block, uint64_t sequence) {
  latest_ = std::max(latest_, sequence);
  Count& count = counts_[block];
  if (sequence >= count.at) {
    count.uses = count.uses * decay(sequence - count.at) + 1;
    count.at = sequence;
  } else {
    count.uses += decay(count.at - sequence);  // a launch reported after a later one
  }
}

bool PromotionAdmission::admits(uint64_t candidate, uint64_t bytes,
                                std::span<const Victim> victims) const {
  if (victims.empty()) return true;
  double displaced = 0;
  double moved = static_cast<double>(bytes);
  for (const Victim& victim : victims) {
    displaced += count(victim.block, latest_) * static_cast<double>(victim.bytes);
    moved += static_cast<double>(victim.bytes);
  }
  return count(candidate, latest_) * static_cast<double>(bytes) > displaced + moved;
}

}  // namespace vramspill::placement
