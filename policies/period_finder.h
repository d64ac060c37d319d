// The period of a job's launches, found from the blocks they touch, for learned (learned.h).
//
// Note [Finding the period]
// A launch is known by the blocks it touches, never by its kernel: a framework runs one kernel
// on many tensors (every elementwise op, every GEMM) and the same tensors through many kernels,
// and a trace has no kernel anyway. Training repeats a step: the same blocks in the same order,
// because a framework's caching allocator hands out the same segments again.
// - Candidates. A launch's signature is its blocks, sorted and hashed; when a signature comes
//   back, the distance to its last sighting is a candidate period. Up to kCandidates are
//   followed at once; a new one waits for a free slot.
// - Repeats are weighed in granules. For a candidate P, each launch is compared with the launch
//   P before it: the granules of the blocks both touch match, those of the blocks only one
//   touches do not. Weighing by size is what the policy cares about (bytes moved), and it
//   forgives what a real job does: a caching allocator that rotates a few small scratch blocks
//   between steps (the PyTorch job recorded on an H200 repeats exactly only every three steps,
//   211 launches each, yet all but 6 launches a step match the step before).
// - A candidate is judged over windows of max(P, kMinWindow) launches. It qualifies once
//   kMinWindow launches in a row have matched the launches a period before (to within
//   1/kTolerance of their granules): the period has begun to repeat with the same blocks. It is
//   then verified as it plays: it is dropped as soon as its mismatched granules in the window
//   pass 1/kTolerance of the larger of the window's granules so far and the previous window's
//   (in its first window, once kMinWindow launches are in): a burst of new launches ends it at
//   once, a stray one does not. A launch at most 2 apart thus locks only after kMinWindow
//   launches in a row match: a loop over the same blocks for a while (an inner loop of a step)
//   is a period until it ends, where two matching launches used to be enough and the locks on
//   2-3 launches came and went all through the steps.
//   Why not wait for a whole period to have matched, as before: a long period then locks a step
//   later than it could, and every launch before the lock is lru's. On the PyTorch job recorded
//   on an H200 (Note [Learning the period] in learned.h) the first step differs from the second,
//   so the step (211 launches) can only start to match in the third; waiting for all of it
//   locked at launch 647, at the end of the third step, 16 matching launches lock at 440 or so,
//   and that step is planned instead of lru's (1.15x MIN's bytes to 1.12x). A period of at most
//   kMinWindow launches locks as late as before.
// - Until one qualifies, the longest candidate followed is the finder's guess at the period
//   (guess()): a step is the longest thing a job repeats, and each candidate is a distance at
//   which a launch's blocks came back. learned evicts by it before it can lock (Note [Guessing
//   the step] in learned.h).
// - The finder is locked on the first candidate that qualifies (the shortest, when several do at
//   once), until that candidate is dropped; then at once on the shortest other that has
//   qualified, if one has. A job with two micro-batches a step repeats its forward and backward
//   passes at half a step, except at the optimizer: half a step qualifies first, and each
//   optimizer phase drops it, but by then the whole step has qualified too and takes over.
// Cost per launch: a sorted merge of the launch with the one a period before, for each of
// kCandidates candidates, and a hash-map lookup; no allocation once the ring has filled.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "policies/eviction_policy.h"

namespace vramspill::policies {

class PeriodFinder {
 public:
  static constexpr uint64_t kMaxPeriod = uint64_t{1} << 15;
  static constexpr uint64_t kMinWindow = 16;
  static constexpr uint64_t kCandidates = 8;
  static constexpr uint64_t kTolerance = 8;

  PeriodFinder();

  // What observing one launch changed: kLocked, that the finder locked, perhaps on another
  // period than the one it was locked on a launch before.
  enum class Change : uint8_t { kNone, kLocked, kUnlocked };

  // Records the next launch: its blocks, distinct and sorted, and each block's weight (its
  // granules), and follows the candidates.
  template <typename Weight>
  Change observe(std::span<const BlockId> sorted_blocks, Weight weight);

  // The period locked on; 0 when none is.
  uint64_t period() const noexcept { return locked_; }
  // Launches observed.
  uint64_t launches() const noexcept { return launches_; }
  // The blocks of launch `index`, one of the last 2 * kMaxPeriod, distinct and sorted.
  std::span<const BlockId> launch(uint64_t index) const { return ring_[index % kRing]; }
  // The longest candidate period followed, qualified or not; 0 when none is (Note [Finding the
  // period]).
  uint64_t guess() const noexcept;
  uint64_t locks() const noexcept { return locks_; }
  uint64_t unlocks() const noexcept { return unlocks_; }

 private:
  static constexpr uint64_t kRing = 2 * kMaxPeriod;

  struct Candidate {
    uint64_t period = 0;  // 0: the slot is free
    uint64_t seen = 0;    // launches of the current window compared
    uint64_t matched = 0;  // launches in a row that matched, up to kMinWindow
    uint64_t granules = 0;
    uint64_t mismatched = 0;
    uint64_t previous_granules = 0;  // the last whole window's
  };

  // Compares launch `now` with the one a period before; the change, if `candidate` qualified
  // or was dropped.
  template <typename Weight>
  Change follow(Candidate& candidate, uint64_t now, Weight weight);
  // Whether `candidate` may be locked on: kMinWindow launches in a row have matched.
  static bool qualified(const Candidate& candidate) noexcept {
    return candidate.matched >= kMinWindow;
  }
  // Frees the candidate's slot (observe() then closes the gap); kUnlocked if it was locked on.
  Change drop(Candidate& candidate);
  // Locks on the shortest candidate that has qualified already; whether there was one.
  bool lock_qualified();
  // A candidate from the last sighting of `signature`, if a slot is free.
  void propose(uint64_t signature, uint64_t now);
  static uint64_t signature_of(std::span<const BlockId> sorted_blocks);

  std::vector<std::vector<BlockId>> ring_;  // the last kRing launches' blocks
  uint64_t launches_ = 0;
  std::unordered_map<uint64_t, uint64_t> seen_;      // signature -> the last launch that had it
  std::array<Candidate, kCandidates> candidates_{};  // shortest period first, free slots last
  uint64_t locked_ = 0;
  uint64_t locks_ = 0;
  uint64_t unlocks_ = 0;
};

template <typename Weight>
PeriodFinder::Change PeriodFinder::observe(std::span<const BlockId> sorted_blocks, Weight weight) {
  const uint64_t now = launches_++;
  ring_[now % kRing].assign(sorted_blocks.begin(), sorted_blocks.end());
  Change change = Change::kNone;
  for (Candidate& candidate : candidates_) {
    if (candidate.period == 0 || candidate.period > now) continue;
    if (const Change made = follow(candidate, now, weight); made != Change::kNone) change = made;
  }
  // Dropped candidates left their slots free; the others keep their order.
  std::stable_partition(candidates_.begin(), candidates_.end(),
                        [](const Candidate& kept) { return kept.period != 0; });
  if (change == Change::kUnlocked && lock_qualified()) change = Change::kLocked;
  if (!sorted_blocks.empty()) propose(signature_of(sorted_blocks), now);
  return change;
}

template <typename Weight>
PeriodFinder::Change PeriodFinder::follow(Candidate& candidate, uint64_t now, Weight weight) {
  // The granules of the blocks only one of the two launches touches, and of both together.
  const std::span<const BlockId> a = launch(now);
  const std::span<const BlockId> b = launch(now - candidate.period);
  uint64_t all = 0;
  uint64_t only_one = 0;
  for (std::size_t i = 0, j = 0; i < a.size() || j < b.size();) {
    const bool from_a = j == b.size() || (i < a.size() && a[i] <= b[j]);
    const bool both = from_a && j < b.size() && a[i] == b[j];
    const uint64_t granules = weight(from_a ? a[i] : b[j]);
    all += granules;
    if (!both) only_one += granules;
    i += from_a ? 1 : 0;
    j += !from_a || both ? 1 : 0;
  }
  candidate.granules += all;
  candidate.mismatched += only_one;
  ++candidate.seen;
  // A launch matches when the granules only one of the two touches are within the tolerance.
  candidate.matched = only_one * kTolerance > all ? 0 : std::min(candidate.matched + 1, kMinWindow);
  const uint64_t window = std::max(candidate.period, kMinWindow);
  if ((candidate.previous_granules != 0 || candidate.seen >= kMinWindow) &&
      candidate.mismatched * kTolerance >
          std::max(candidate.granules, candidate.previous_granules)) {
    return drop(candidate);
  }
  if (candidate.seen >= window) {
    candidate.previous_granules = candidate.granules;
    candidate.seen = candidate.granules = candidate.mismatched = 0;
  }
  // Of several that qualify at once, the shortest.
  if (locked_ != 0 || !qualified(candidate)) return Change::kNone;
  locked_ = candidate.period;
  ++locks_;
  return Change::kLocked;
}

}  // namespace vramspill::policies
