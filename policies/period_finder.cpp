#include "policies/period_finder.h"

#include <algorithm>

namespace vramspill::policies {
namespace {

// Signatures remembered for finding candidates; forgotten all at once past this (a job whose
// launches never repeat must not grow the map without end).
constexpr std::size_t kMaxSignatures = 4 * PeriodFinder::kMaxPeriod;

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

PeriodFinder::PeriodFinder() : ring_(kRing) {}

uint64_t PeriodFinder::signature_of(std::span<const BlockId> sorted_blocks) {
  uint64_t signature = 0x9e3779b97f4a7c15ULL;
  for (const BlockId block : sorted_blocks) signature = mix(signature ^ mix(block));
  return signature;
}

PeriodFinder::Change PeriodFinder::drop(Candidate& candidate) {
  const bool was_locked = candidate.period == locked_;
  candidate = Candidate{};
  if (!was_locked) return Change::kNone;
  locked_ = 0;
  ++unlocks_;
  return Change::kUnlocked;
}

uint64_t PeriodFinder::guess() const noexcept {
  // Slots are shortest first, free ones last.
  const auto longest = std::find_if(candidates_.rbegin(), candidates_.rend(),
                                    [](const Candidate& slot) { return slot.period != 0; });
  return longest == candidates_.rend() ? 0 : longest->period;
}

bool PeriodFinder::lock_qualified() {
  // Slots are shortest first.
  const auto found = std::find_if(candidates_.begin(), candidates_.end(), [](const Candidate& c) {
    return c.period != 0 && qualified(c);
  });
  if (found == candidates_.end()) return false;
  locked_ = found->period;
  ++locks_;
  return true;
}

void PeriodFinder::propose(uint64_t signature, uint64_t now) {
  if (seen_.size() >= kMaxSignatures) seen_.clear();
  const auto [found, first] = seen_.try_emplace(signature, now);
  if (first) return;
  const uint64_t period = now - found->second;
  found->second = now;
  if (period > kMaxPeriod) return;
  const auto free = std::find_if(candidates_.begin(), candidates_.end(),
                                 [](const Candidate& slot) { return slot.period == 0; });
  if (free == candidates_.end()) return;
  if (std::any_of(candidates_.begin(), free,
                  [&](const Candidate& slot) { return slot.period == period; }))
    return;
  *free = Candidate{.period = period};
  std::sort(candidates_.begin(), free + 1,
            [](const Candidate& a, const Candidate& b) { return a.period < b.period; });
}

}  // namespace vramspill::policies
