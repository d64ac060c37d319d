#include "policies/learned.h"

#include <algorithm>

namespace vramspill::policies {
namespace {

// Launches remembered: two of the longest period, so a candidate can be checked against the one
// before it.
constexpr uint64_t kRing = 2 * LearnedPolicy::kMaxPeriod;
// Signatures remembered for finding candidates; forgotten all at once past this (a job whose
// launches never repeat must not grow the map without end).
constexpr std::size_t kMaxSignatures = 4 * LearnedPolicy::kMaxPeriod;

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// The signature of a launch: its distinct blocks, sorted, hashed (Note [Learning the period]).
uint64_t signature_of(std::span<const BlockId> sorted_blocks) {
  uint64_t signature = 0x9e3779b97f4a7c15ULL;
  for (const BlockId block : sorted_blocks) signature = mix(signature ^ mix(block));
  return signature;
}

}  // namespace

LearnedPolicy::LearnedPolicy(const PolicyOptions& options)
    : EvictionPolicy(options), fallback_(options), signatures_(kRing), launch_blocks_(kRing) {}

void LearnedPolicy::do_allocated(BlockId block, uint64_t granules, bool on_device) {
  fallback_.allocated(block, granules, on_device);
  if (!on_device) return;
  on_device_[block] = granules;
  device_granules_ += granules;
  if (locked_) order(block);
}

void LearnedPolicy::do_freed(BlockId block) {
  fallback_.freed(block);
  if (const auto found = on_device_.find(block); found != on_device_.end()) {
    device_granules_ -= found->second;
    on_device_.erase(found);
  }
  unorder(block);
}

void LearnedPolicy::do_moved(BlockId block, uint64_t device_granules) {
  fallback_.moved(block, device_granules);
  uint64_t& held = on_device_[block];
  device_granules_ = device_granules_ - held + device_granules;
  held = device_granules;
  if (device_granules == 0) {
    on_device_.erase(block);
    unorder(block);
  } else if (locked_) {
    order(block);
  }
}

void LearnedPolicy::do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) {
  fallback_.used(sequence, stream, blocks);
  // The ring's slot keeps its capacity: no allocation once every slot has held a launch.
  std::vector<BlockId>& sorted = launch_blocks_[launches_ % kRing];
  sorted.assign(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  learn(signature_of(sorted));
  if (!locked_) return;
  for (const BlockId block : sorted) {  // their next uses moved on; nobody else's did
    if (ordered_at_.contains(block)) order(block);
  }
}

void LearnedPolicy::learn(uint64_t signature) {
  const uint64_t now = launches_++;
  signatures_[now % kRing] = signature;
  if (period_ != 0 && now >= period_ && signatures_[(now - period_) % kRing] == signature) {
    if (++matched_ >= std::min(period_, kLockAfter) && !locked_) lock();
    // Locked, the candidates are not needed until it unlocks: unlock() brings them up to date.
    if (locked_) return;
  } else {
    if (locked_) unlock(now);
    const auto found = seen_.find(signature);
    period_ = found != seen_.end() && now - found->second <= kMaxPeriod ? now - found->second : 0;
    matched_ = period_ != 0 ? 1 : 0;
  }
  see(signature, now);
}

void LearnedPolicy::see(uint64_t signature, uint64_t launch) {
  if (seen_.size() >= kMaxSignatures) seen_.clear();
  seen_[signature] = launch;
}

void LearnedPolicy::unlock(uint64_t now) {
  locked_ = false;
  ++unlocks_;
  by_next_use_.clear();
  ordered_at_.clear();
  // The launches seen while locked, from the ring: a candidate from a sighting before the lock
  // would be a distance that merely happens to match for kLockAfter launches. Only the last
  // kMaxPeriod can give a candidate.
  for (uint64_t launch = std::max(locked_at_, now > kMaxPeriod ? now - kMaxPeriod : 0);
       launch < now; ++launch)
    see(signatures_[launch % kRing], launch);
}

void LearnedPolicy::lock() {
  plan_.clear();
  plan_start_ = launches_ - period_;  // the last whole period is the plan
  for (uint64_t phase = 0; phase < period_; ++phase) {
    for (const BlockId block : launch_blocks_[(plan_start_ + phase) % kRing])
      plan_[block].push_back(phase);
  }
  locked_ = true;
  locked_at_ = launches_;
  ++locks_;
  for (const auto& [block, held] : on_device_) order(block);
}

std::string LearnedPolicy::do_learned_state() const {
  if (locked_) {
    return "locked on a period of " + std::to_string(period_) +
           " launches: evicting what is needed again furthest ahead";
  }
  if (locks_ == 0) return "no period found yet: evicting as lru";
  return "the launches stopped repeating the period (" + std::to_string(unlocks_) +
         " times so far): evicting as lru until a period repeats again";
}

uint64_t LearnedPolicy::next_use(BlockId block) const {
  const auto found = plan_.find(block);
  if (found == plan_.end()) return kNever;
  const std::vector<uint64_t>& phases = found->second;
  const uint64_t now = (launches_ - 1 - plan_start_) % period_;
  const auto later = std::upper_bound(phases.begin(), phases.end(), now);
  return launches_ - 1 + (later != phases.end() ? *later - now : period_ - now + phases.front());
}

void LearnedPolicy::order(BlockId block) {
  const uint64_t next = next_use(block);
  const auto [at, added] = ordered_at_.try_emplace(block, next);
  if (added) {
    by_next_use_.emplace(next, block);
    return;
  }
  if (at->second == next) return;
  // The node is reused: no allocation on the launch path. A use usually sends a block furthest
  // ahead of all, so the insert is hinted with the end.
  auto node = by_next_use_.extract({at->second, block});
  node.value().first = next;
  by_next_use_.insert(by_next_use_.end(), std::move(node));
  at->second = next;
}

void LearnedPolicy::unorder(BlockId block) {
  if (const auto found = ordered_at_.find(block); found != ordered_at_.end()) {
    by_next_use_.erase({found->second, block});
    ordered_at_.erase(found);
  }
}

std::vector<BlockId> LearnedPolicy::do_choose_victims(uint64_t granules_needed,
                                                      std::span<const BlockId> keep) {
  if (!locked_) {
    fallback_.set_capacity(capacity_granules());
    return fallback_.choose_victims(granules_needed, keep).blocks;
  }
  std::vector<BlockId> victims;
  uint64_t freed = 0;
  for (auto it = by_next_use_.rbegin(); it != by_next_use_.rend() && freed < granules_needed;
       ++it) {
    if (std::find(keep.begin(), keep.end(), it->second) != keep.end()) continue;
    victims.push_back(it->second);
    freed += device_granules(it->second);
  }
  return victims;
}

bool LearnedPolicy::do_should_promote(BlockId block) {
  if (granules(block) > capacity_granules()) return false;
  if (!locked_) {
    fallback_.set_capacity(capacity_granules());
    return fallback_.should_promote(block);
  }
  // Note [Planning with the period]: in if it fits, or if what it would displace is needed later.
  const uint64_t needed = granules(block) - device_granules(block);
  const uint64_t room = capacity_granules() - std::min(capacity_granules(), device_granules_);
  if (needed <= room) return true;
  const uint64_t next = next_use(block);
  if (next == kNever) return false;
  uint64_t displaceable = room;
  const std::vector<BlockId>& launch = launch_blocks_[(launches_ - 1) % kRing];
  for (auto it = by_next_use_.rbegin(); it != by_next_use_.rend() && it->first > next; ++it) {
    if (std::binary_search(launch.begin(), launch.end(), it->second)) continue;
    displaceable += device_granules(it->second);
    if (displaceable >= needed) return true;
  }
  return false;
}

}  // namespace vramspill::policies
