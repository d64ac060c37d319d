#include "policies/learned.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>

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

// The highest index in [low, high] whose bit is set in `bits`; UINT64_MAX when there is none.
uint64_t highest_set(const std::vector<uint64_t>& bits, uint64_t low, uint64_t high) {
  uint64_t mask = high % 64 == 63 ? ~uint64_t{0} : (uint64_t{1} << (high % 64 + 1)) - 1;
  for (uint64_t word = high / 64;; --word, mask = ~uint64_t{0}) {
    if (word == low / 64) mask &= ~uint64_t{0} << (low % 64);
    if (const uint64_t set = bits[word] & mask; set != 0) {
      return word * 64 + 63 - static_cast<uint64_t>(std::countl_zero(set));
    }
    if (word == low / 64) return UINT64_MAX;
  }
}

}  // namespace

LearnedPolicy::LearnedPolicy(const PolicyOptions& options)
    : EvictionPolicy(options), fallback_(options), signatures_(kRing), launch_blocks_(kRing) {}

LearnedPolicy::Block& LearnedPolicy::entry(BlockId block) {
  Block& found = blocks_.try_emplace(block).first->second;
  found.id = block;
  return found;
}

bool LearnedPolicy::holds_nothing(const Block& block) noexcept {
  return block.plan_count == 0 && block.device_granules == 0 &&
         block.place == Block::Place::kNone && block.lru_sequence == 0;
}

void LearnedPolicy::do_allocated(BlockId block, uint64_t granules, bool on_device) {
  fallback_.allocated(block, granules, on_device);
  if (!on_device) return;
  Block& allocated = entry(block);
  allocated.device_granules = granules;
  device_granules_ += granules;
  if (locked_) order(allocated);
}

void LearnedPolicy::do_freed(BlockId block) {
  fallback_.freed(block);
  const auto found = blocks_.find(block);
  if (found == blocks_.end()) return;
  Block& freed = found->second;  // its plan stays: a new block may take its id
  device_granules_ -= freed.device_granules;
  freed.device_granules = 0;
  freed.lru_sequence = 0;  // lru has forgotten it
  unorder(freed);
  if (holds_nothing(freed)) blocks_.erase(block);
}

void LearnedPolicy::do_moved(BlockId block, uint64_t device_granules) {
  fallback_.moved(block, device_granules);
  Block& moved = entry(block);
  device_granules_ = device_granules_ - moved.device_granules + device_granules;
  moved.device_granules = device_granules;
  if (device_granules == 0) {
    unorder(moved);
    if (holds_nothing(moved)) blocks_.erase(block);
  } else if (locked_) {
    order(moved);
  }
}

void LearnedPolicy::do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) {
  // Locked, lru hears of the blocks when the lock ends (Note [Keeping lru warm]).
  const bool was_locked = locked_;
  fallback_.used(sequence, stream, was_locked ? std::span<const BlockId>() : blocks);
  // The launch's slot keeps its capacity: no allocation once every slot has held a launch.
  std::vector<BlockId>& sorted = launch_blocks_[launches_ % kRing];
  sorted.assign(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  learn(signature_of(sorted));
  if (!locked_) {
    if (was_locked) fallback_.used(sequence, stream, blocks);  // the launch that broke the lock
    return;
  }
  // lock() has just ordered every block at its next use.
  if (!was_locked) return;
  for (const BlockId block : sorted) {  // their next uses moved on; nobody else's did
    Block& used = entry(block);
    used.lru_sequence = std::max(used.lru_sequence, sequence);
    if (used.place != Block::Place::kNone) order(used);
  }
  retire(launches_ - 1);
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
  // Nothing is ordered any more, and lru hears the blocks of the launches since the lock, each
  // block's last (Note [Keeping lru warm]).
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    Block& block = it->second;
    block.place = Block::Place::kNone;
    if (block.lru_sequence != 0) {
      fallback_.used(block.lru_sequence, 0, std::span<const BlockId>(&block.id, 1));
      block.lru_sequence = 0;
    }
    it = holds_nothing(block) ? blocks_.erase(it) : std::next(it);
  }
  for (std::vector<Block*>& bucket : ring_) bucket.clear();
  std::fill(full_.begin(), full_.end(), 0);
  never_used_.clear();
  went_by_.clear();
  // The launches seen while locked, from the ring: a candidate from a sighting before the lock
  // would be a distance that merely happens to match for kLockAfter launches. Only the last
  // kMaxPeriod can give a candidate.
  for (uint64_t launch = std::max(locked_at_, now > kMaxPeriod ? now - kMaxPeriod : 0);
       launch < now; ++launch)
    see(signatures_[launch % kRing], launch);
}

void LearnedPolicy::lock() {
  plan_start_ = launches_ - period_;  // the last whole period is the plan
  // Each block's phases, in phase order, laid out block after block: count them, place each
  // block's run, fill the runs.
  for (auto& [id, block] : blocks_) block.plan_count = 0;
  for (uint64_t phase = 0; phase < period_; ++phase) {
    for (const BlockId block : launch_blocks_[(plan_start_ + phase) % kRing])
      ++entry(block).plan_count;
  }
  uint64_t first = 0;
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    Block& block = it->second;
    if (holds_nothing(block)) {
      it = blocks_.erase(it);
      continue;
    }
    block.plan_first = first;
    first += block.plan_count;
    block.plan_count = 0;  // counted again as the phases are filled in
    ++it;
  }
  plan_phases_.resize(first);
  for (uint64_t phase = 0; phase < period_; ++phase) {
    for (const BlockId id : launch_blocks_[(plan_start_ + phase) % kRing]) {
      Block& block = blocks_.find(id)->second;
      plan_phases_[block.plan_first + block.plan_count++] = static_cast<uint32_t>(phase);
    }
  }
  locked_ = true;
  locked_at_ = launches_;
  ++locks_;
  ring_.resize(period_);
  full_.assign((period_ + 63) / 64, 0);
  for (auto& [id, block] : blocks_) {
    if (block.device_granules > 0) order(block);
  }
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

uint64_t LearnedPolicy::next_use(const Block& block) const {
  if (block.plan_count == 0) return kNever;
  const uint32_t* const first = plan_phases_.data() + block.plan_first;
  const uint32_t* const last = first + block.plan_count;
  const uint64_t now = (launches_ - 1 - plan_start_) % period_;
  const uint32_t* const later = std::upper_bound(first, last, now);
  return launches_ - 1 + (later != last ? *later - now : period_ - now + *first);
}

void LearnedPolicy::order(Block& block) {
  const uint64_t next = next_use(block);
  if (block.place != Block::Place::kNone && block.next_use == next) return;
  // Used once a period, a block stays in its bucket, which now stands for its next use.
  if (block.place == Block::Place::kRing && next != kNever &&
      next % period_ == block.next_use % period_) {
    block.next_use = next;
    return;
  }
  unorder(block);
  block.next_use = next;
  if (next == kNever) {
    block.place = Block::Place::kNeverUsed;
    never_used_.insert(block.id);
    return;
  }
  const uint64_t index = next % period_;
  std::vector<Block*>& into = ring_[index];
  full_[index / 64] |= uint64_t{1} << (index % 64);
  block.place = Block::Place::kRing;
  block.slot = static_cast<uint32_t>(into.size());
  into.push_back(&block);
}

void LearnedPolicy::unorder(Block& block) {
  switch (block.place) {
    case Block::Place::kNone:
      return;
    case Block::Place::kRing: {
      const uint64_t index = block.next_use % period_;
      std::vector<Block*>& from = ring_[index];
      from[block.slot] = from.back();
      from[block.slot]->slot = block.slot;
      from.pop_back();
      if (from.empty()) full_[index / 64] &= ~(uint64_t{1} << (index % 64));
      break;
    }
    case Block::Place::kNeverUsed:
      never_used_.erase(block.id);
      break;
    case Block::Place::kWentBy:
      went_by_.erase({block.next_use, block.id});
      break;
  }
  block.place = Block::Place::kNone;
}

void LearnedPolicy::retire(uint64_t now) {
  std::vector<Block*>& at_now = ring_[now % period_];
  for (std::size_t i = 0; i < at_now.size();) {
    Block& block = *at_now[i];
    if (block.next_use != now) {
      ++i;
      continue;
    }
    unorder(block);  // the bucket's last block takes slot i
    block.place = Block::Place::kWentBy;
    went_by_.emplace(now, block.id);
  }
}

template <typename Visit>
bool LearnedPolicy::visit_ring(uint64_t after, Visit visit) const {
  // The launches ahead, now + period_ down to now + 1, are the buckets now % period_ down to 0,
  // then period_ - 1 down to now % period_ + 1.
  const uint64_t now = launches_ - 1;
  const uint64_t top = now % period_;
  const std::array<std::pair<uint64_t, uint64_t>, 2> ranges = {{{0, top}, {top + 1, period_ - 1}}};
  for (const auto& [low, high] : ranges) {
    for (uint64_t end = high + 1; end > low;) {  // the buckets [low, end) are left
      const uint64_t index = highest_set(full_, low, end - 1);
      if (index == UINT64_MAX) break;
      const uint64_t launch = index <= top ? now + period_ - (top - index) : now + (index - top);
      if (launch <= after) return true;
      if (!visit(ring_[index], launch)) return false;
      end = index;
    }
  }
  return true;
}

std::vector<BlockId> LearnedPolicy::do_choose_victims(uint64_t granules_needed,
                                                      std::span<const BlockId> keep) {
  if (!locked_) {
    fallback_.set_capacity(capacity_granules());
    return fallback_.choose_victims(granules_needed, keep).blocks;
  }
  // Farthest next use first: never used, the ring, those that went by; the higher id first
  // within a launch.
  std::vector<BlockId> victims;
  uint64_t freed = 0;
  const auto give_up = [&](BlockId block) {  // false once there is room enough
    if (freed >= granules_needed) return false;
    if (std::find(keep.begin(), keep.end(), block) != keep.end()) return true;
    victims.push_back(block);
    freed += device_granules(block);
    return true;
  };
  for (auto it = never_used_.rbegin(); it != never_used_.rend(); ++it) {
    if (!give_up(*it)) return victims;
  }
  std::vector<BlockId> launch;
  const bool more = visit_ring(launches_ - 1, [&](const std::vector<Block*>& bucket, uint64_t) {
    launch.clear();
    for (const Block* block : bucket) launch.push_back(block->id);
    std::sort(launch.begin(), launch.end(), std::greater<>());
    return std::all_of(launch.begin(), launch.end(), give_up);
  });
  if (!more) return victims;
  for (auto it = went_by_.rbegin(); it != went_by_.rend(); ++it) {
    if (!give_up(it->second)) return victims;
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
  const auto found = blocks_.find(block);
  const uint64_t next = found != blocks_.end() ? next_use(found->second) : kNever;
  if (next == kNever) return false;
  const std::vector<BlockId>& launch = launch_blocks_[(launches_ - 1) % kRing];
  return room + displaceable_after(next, needed - room, launch) >= needed;
}

// Note [Learned promotes ahead]
std::vector<BlockId> LearnedPolicy::do_promote_ahead(uint64_t room_taken,
                                                     std::span<const BlockId> keep) {
  std::vector<BlockId> ahead;
  if (!locked_) return ahead;
  std::vector<BlockId> kept(keep.begin(), keep.end());
  std::sort(kept.begin(), kept.end());
  // The room left, grown from the blocks on the device the plan never uses again only as far
  // as the blocks named need: a stop walks no more of them than it could displace.
  uint64_t room = capacity_granules() - std::min(capacity_granules(), device_granules_);
  auto never_used = never_used_.begin();
  const auto room_for = [&](uint64_t wanted) {
    for (; room < wanted && never_used != never_used_.end(); ++never_used) {
      if (!std::binary_search(kept.begin(), kept.end(), *never_used))
        room += device_granules(*never_used);
    }
    return room >= wanted;
  };
  uint64_t claimed = room_taken;
  const uint64_t now = launches_ - 1;
  // While locked, launch `now + i` repeats launch `now + i - period_` (Note [Learning the period]).
  for (uint64_t launch = now + 1; launch <= now + std::min(kAheadLaunches, period_); ++launch) {
    for (const BlockId block : launch_blocks_[(launch - period_) % kRing]) {
      const uint64_t needed = granules(block) - device_granules(block);
      if (needed == 0 || granules(block) > capacity_granules() ||
          std::binary_search(kept.begin(), kept.end(), block) ||
          std::find(ahead.begin(), ahead.end(), block) != ahead.end())
        continue;
      if (!room_for(claimed + needed)) return ahead;
      ahead.push_back(block);
      claimed += needed;
    }
  }
  return ahead;
}

uint64_t LearnedPolicy::displaceable_after(uint64_t launch, uint64_t enough,
                                           std::span<const BlockId> excluded) const {
  uint64_t displaceable = 0;
  const auto counts = [&](BlockId other) {
    if (std::binary_search(excluded.begin(), excluded.end(), other)) return false;
    displaceable += device_granules(other);
    return displaceable >= enough;
  };
  // Only the sum counts, so within a launch any order will do.
  if (std::any_of(never_used_.begin(), never_used_.end(), counts)) return displaceable;
  visit_ring(launch, [&](const std::vector<Block*>& bucket, uint64_t) {
    return std::none_of(bucket.begin(), bucket.end(),
                        [&](const Block* other) { return counts(other->id); });
  });
  return displaceable;
}

}  // namespace vramspill::policies
