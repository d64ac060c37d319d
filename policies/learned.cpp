#include "policies/learned.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>

namespace vramspill::policies {
namespace {

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

LearnedPolicy::Block& LearnedPolicy::entry(BlockId block) {
  Block& found = blocks_.try_emplace(block).first->second;
  found.id = block;
  return found;
}

bool LearnedPolicy::holds_nothing(const Block& block) noexcept {
  return block.uses.empty() && block.device_granules == 0 && block.place == Block::Place::kNone &&
         block.lru_sequence == 0;
}

void LearnedPolicy::do_allocated(BlockId block, uint64_t granules, bool on_device) {
  fallback_.allocated(block, granules, on_device);
  if (!on_device) return;
  try {
    Block& allocated = entry(block);
    allocated.device_granules = granules;
    device_granules_ += granules;
    if (plan_ != 0) order(allocated);
  } catch (...) {
    do_freed(block);  // no trace of it, lru's books included (EvictionPolicy::allocated)
    throw;
  }
}

void LearnedPolicy::do_freed(BlockId block) {
  fallback_.freed(block);
  forget_promise(block);
  const auto found = blocks_.find(block);
  if (found == blocks_.end()) return;
  Block& freed = found->second;  // its uses stay in the plan: a new block may take its id
  device_granules_ -= freed.device_granules;
  freed.device_granules = 0;
  freed.lru_sequence = 0;  // lru has forgotten it
  unorder(freed);
  if (holds_nothing(freed)) blocks_.erase(block);
}

void LearnedPolicy::do_moved(BlockId block, uint64_t device_granules) {
  fallback_.moved(block, device_granules);
  forget_promise(block);  // what came in is in the books now
  Block& moved = entry(block);
  device_granules_ = device_granules_ - moved.device_granules + device_granules;
  moved.device_granules = device_granules;
  if (device_granules == 0) {
    unorder(moved);
    if (holds_nothing(moved)) blocks_.erase(block);
  } else if (plan_ != 0) {
    order(moved);
  }
}

void LearnedPolicy::do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) {
  // Locked, lru hears of the blocks when the lock ends (Note [Keeping lru warm]).
  const bool was_locked = period() != 0;
  fallback_.used(sequence, stream, was_locked ? std::span<const BlockId>() : blocks);
  promised_.clear();  // a new launch: Note [A launch's promotions]
  sorted_.assign(blocks.begin(), blocks.end());
  std::sort(sorted_.begin(), sorted_.end());
  sorted_.erase(std::unique(sorted_.begin(), sorted_.end()), sorted_.end());
  const PeriodFinder::Change change =
      finder_.observe(sorted_, [&](BlockId block) { return granules(block); });
  if (change == PeriodFinder::Change::kNone) {
    if (plan_ != 0) slide(finder_.launches() - 1, sequence);
    return;
  }
  if (was_locked) {  // off the period it was locked on
    unlock();
    fallback_.used(sequence, stream, blocks);  // the launch that broke the lock
  }
  if (change == PeriodFinder::Change::kLocked) plan(period());  // including this launch
}

void LearnedPolicy::slide(uint64_t now, uint64_t sequence) {
  for (const BlockId id : finder_.launch(now)) {
    Block& used = entry(id);
    if (period() != 0) used.lru_sequence = std::max(used.lru_sequence, sequence);
    used.uses.push_back(now);
    if (used.place != Block::Place::kNone) order(used);
  }
  const uint64_t period = plan_;
  if (now < period) return;
  for (const BlockId id : finder_.launch(now - period)) {
    const auto found = blocks_.find(id);
    if (found == blocks_.end()) continue;
    Block& left = found->second;
    if (left.first_use == left.uses.size() || left.uses[left.first_use] != now - period) continue;
    // The entries before first_use go once they are half of the vector: amortised O(1), and
    // the vector keeps its capacity.
    if (++left.first_use * 2 >= left.uses.size()) {
      left.uses.erase(left.uses.begin(), left.uses.begin() + left.first_use);
      left.first_use = 0;
    }
    if (holds_nothing(left)) {
      blocks_.erase(found);  // freed, or on the host with nothing left for lru to hear
    } else if (left.place != Block::Place::kNone) {
      order(left);
    }
  }
}

void LearnedPolicy::plan(uint64_t period) {
  unplan();
  // All or nothing: a bad_alloc midway leaves no plan (plan_ 0), never a period the ring was not
  // sized for, and the next decision plans again (ensure_plan).
  try {
    ring_.assign(period, {});
    full_.assign((period + 63) / 64, 0);
    const uint64_t now = finder_.launches() - 1;
    for (uint64_t launch = now + 1 - period; launch <= now; ++launch) {
      for (const BlockId id : finder_.launch(launch)) entry(id).uses.push_back(launch);
    }
    plan_ = period;  // order() places by it
    for (auto& [id, block] : blocks_) {
      if (block.device_granules > 0) order(block);
    }
  } catch (...) {
    unplan();
    throw;
  }
}

void LearnedPolicy::ensure_plan(uint64_t period) {
  if (period != plan_) plan(period);
}

void LearnedPolicy::unplan() noexcept {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    Block& block = it->second;
    block.place = Block::Place::kNone;
    block.uses.clear();
    block.first_use = 0;
    it = holds_nothing(block) ? blocks_.erase(it) : std::next(it);
  }
  for (std::vector<Block*>& bucket : ring_) bucket.clear();
  std::fill(full_.begin(), full_.end(), 0);
  never_used_.clear();
  plan_ = 0;
}

void LearnedPolicy::unlock() {
  // lru hears the blocks of the launches since the lock, each block's last (Note [Keeping lru
  // warm]).
  for (auto& [id, block] : blocks_) {
    if (block.lru_sequence == 0) continue;
    fallback_.used(block.lru_sequence, 0, std::span<const BlockId>(&block.id, 1));
    block.lru_sequence = 0;
  }
  unplan();
}

std::string LearnedPolicy::do_learned_state() const {
  if (period() != 0) {
    return "locked on a period of " + std::to_string(period()) +
           " launches: evicting what is needed again furthest ahead";
  }
  constexpr std::string_view kUnlocked =
      "evicting by a guess at the step where there is one, else as lru";
  if (finder_.locks() == 0) return "no period found yet: " + std::string(kUnlocked);
  return "the launches stopped repeating the period (" + std::to_string(finder_.unlocks()) +
         " times so far): " + std::string(kUnlocked) + ", until a period repeats again";
}

uint64_t LearnedPolicy::next_use(const Block& block) const {
  // A period after its first use in the last period (Note [Learning the period]).
  return block.first_use == block.uses.size() ? kNever : block.uses[block.first_use] + plan_;
}

void LearnedPolicy::order(Block& block) {
  const uint64_t next = next_use(block);
  if (block.place != Block::Place::kNone && block.next_use == next) return;
  // Used once a period, a block stays in its bucket, which now stands for its next use.
  if (block.place == Block::Place::kRing && next != kNever &&
      next % plan_ == block.next_use % plan_) {
    block.next_use = next;
    return;
  }
  unorder(block);
  block.next_use = next;
  if (next == kNever) {
    // In lru's order, the launches lru has not been told of yet included (Note [Keeping lru
    // warm]).
    LruPolicy::Recency recency = fallback_.recency(block.id);
    recency.last_use = std::max(recency.last_use, block.lru_sequence);
    never_used_.emplace(recency, block.id);  // first: a bad_alloc leaves the block unplaced
    block.recency = recency;
    block.place = Block::Place::kNeverUsed;
    return;
  }
  const uint64_t index = next % plan_;
  std::vector<Block*>& into = ring_[index];
  into.push_back(&block);  // first: a bad_alloc leaves the block unplaced
  full_[index / 64] |= uint64_t{1} << (index % 64);
  block.place = Block::Place::kRing;
  block.slot = static_cast<uint32_t>(into.size() - 1);
}

void LearnedPolicy::unorder(Block& block) {
  switch (block.place) {
    case Block::Place::kNone:
      return;
    case Block::Place::kRing: {
      const uint64_t index = block.next_use % plan_;
      std::vector<Block*>& from = ring_[index];
      from[block.slot] = from.back();
      from[block.slot]->slot = block.slot;
      from.pop_back();
      if (from.empty()) full_[index / 64] &= ~(uint64_t{1} << (index % 64));
      break;
    }
    case Block::Place::kNeverUsed:
      never_used_.erase(block.recency);
      break;
  }
  block.place = Block::Place::kNone;
}

template <typename Visit>
bool LearnedPolicy::visit_ring(uint64_t after, Visit visit) const {
  // The launches ahead, now + period down to now + 1, are the buckets now % period down to 0,
  // then period - 1 down to now % period + 1.
  const uint64_t period = plan_;
  const uint64_t now = finder_.launches() - 1;
  const uint64_t top = now % period;
  const std::array<std::pair<uint64_t, uint64_t>, 2> ranges = {{{0, top}, {top + 1, period - 1}}};
  for (const auto& [low, high] : ranges) {
    for (uint64_t end = high + 1; end > low;) {  // the buckets [low, end) are left
      const uint64_t index = highest_set(full_, low, end - 1);
      if (index == UINT64_MAX) break;
      const uint64_t launch = index <= top ? now + period - (top - index) : now + (index - top);
      if (launch <= after) return true;
      if (!visit(ring_[index], launch)) return false;
      end = index;
    }
  }
  return true;
}

std::vector<BlockId> LearnedPolicy::do_choose_victims(uint64_t granules_needed,
                                                      std::span<const BlockId> keep) {
  // Unlocked, the plan is made with the guess at the period (Note [Guessing the step]).
  const uint64_t plan_period = period() != 0 ? period() : finder_.guess();
  if (plan_period == 0) {
    fallback_.set_capacity(capacity_granules());
    return fallback_.choose_victims(granules_needed, keep).blocks;
  }
  ensure_plan(plan_period);
  return planned_victims(granules_needed, keep);
}

std::vector<BlockId> LearnedPolicy::planned_victims(uint64_t granules_needed,
                                                    std::span<const BlockId> keep) {
  // Farthest next use first: never used (in lru's order), then the ring; the higher id first
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
  if (std::all_of(never_used_.begin(), never_used_.end(),
                  [&](const auto& never) { return give_up(never.second); })) {
    std::vector<BlockId> launch;
    visit_ring(finder_.launches() - 1, [&](const std::vector<Block*>& bucket, uint64_t) {
      launch.clear();
      for (const Block* block : bucket) launch.push_back(block->id);
      std::sort(launch.begin(), launch.end(), std::greater<>());
      return std::all_of(launch.begin(), launch.end(), give_up);
    });
  }
  // The last gives up only what the need leaves; a caller that moves whole victims gets back
  // those whose room the others cover, soonest needed first (Note [Planning with the period]).
  if (may_evict_in_part()) return victims;
  std::vector<BlockId> kept;  // in the order given, built backwards
  for (std::size_t i = victims.size(); i-- > 0;) {
    const uint64_t granules = device_granules(victims[i]);
    if (freed - granules >= granules_needed) {
      freed -= granules;
    } else {
      kept.push_back(victims[i]);
    }
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

bool LearnedPolicy::do_should_promote(BlockId block) {
  if (granules(block) > capacity_granules()) return false;
  if (period() == 0) {
    fallback_.set_capacity(capacity_granules());
    return fallback_.should_promote(block);
  }
  ensure_plan(period());  // made at the lock, unless a bad_alloc undid it
  forget_promise(block);  // asked again: its own yes takes no room from it
  const uint64_t needed = granules(block) - device_granules(block);
  if (!displaces_nothing_needed_sooner(block, needed + promised_granules())) return false;
  promised_.push_back({block, needed});
  return true;
}

bool LearnedPolicy::displaces_nothing_needed_sooner(BlockId block, uint64_t incoming) const {
  // Note [Planning with the period]: in if it fits, or if what it would displace is needed later.
  const uint64_t room = capacity_granules() - std::min(capacity_granules(), device_granules_);
  if (incoming <= room) return true;
  const auto found = blocks_.find(block);
  const uint64_t next = found != blocks_.end() ? next_use(found->second) : kNever;
  if (next == kNever) return false;
  return room + displaceable_after(next, incoming - room, finder_.launch(finder_.launches() - 1)) >=
         incoming;
}

void LearnedPolicy::forget_promise(BlockId block) noexcept {
  std::erase_if(promised_, [&](const Promise& promise) { return promise.block == block; });
}

uint64_t LearnedPolicy::promised_granules() const noexcept {
  uint64_t total = 0;
  for (const Promise& promise : promised_) total += promise.granules;
  return total;
}

// Note [Learned promotes ahead]
std::vector<BlockId> LearnedPolicy::do_promote_ahead(uint64_t room_taken,
                                                     std::span<const BlockId> keep) {
  std::vector<BlockId> ahead;
  const uint64_t period = finder_.period();
  if (period == 0) return ahead;
  std::vector<BlockId> kept(keep.begin(), keep.end());
  std::sort(kept.begin(), kept.end());
  // The room left, grown from the blocks on the device the plan never uses again only as far
  // as the blocks named need: a stop walks no more of them than it could displace.
  uint64_t room = capacity_granules() - std::min(capacity_granules(), device_granules_);
  auto never_used = never_used_.begin();
  const auto room_for = [&](uint64_t wanted) {
    for (; room < wanted && never_used != never_used_.end(); ++never_used) {
      if (!std::binary_search(kept.begin(), kept.end(), never_used->second))
        room += device_granules(never_used->second);
    }
    return room >= wanted;
  };
  uint64_t claimed = room_taken;
  const uint64_t now = finder_.launches() - 1;
  // While locked, launch `now + i` repeats launch `now + i - period` (Note [Learning the period]).
  for (uint64_t launch = now + 1; launch <= now + std::min(kAheadLaunches, period); ++launch) {
    for (const BlockId block : finder_.launch(launch - period)) {
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
  if (std::any_of(never_used_.begin(), never_used_.end(),
                  [&](const auto& never) { return counts(never.second); }))
    return displaceable;
  visit_ring(launch, [&](const std::vector<Block*>& bucket, uint64_t) {
    return std::none_of(bucket.begin(), bucket.end(),
                        [&](const Block* other) { return counts(other->id); });
  });
  return displaceable;
}

}  // namespace vramspill::policies
