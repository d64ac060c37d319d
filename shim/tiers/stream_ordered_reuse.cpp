#include "tiers/stream_ordered_reuse.h"

#include <algorithm>
#include <new>

namespace vramspill::tiers {

bool StreamOrderedReuse::made(uint64_t base) noexcept {
  const std::lock_guard lock(mutex_);
  try {
    live_.insert(base);
  } catch (const std::bad_alloc&) {
    return false;
  }
  ++stats_.made;
  return true;
}

void StreamOrderedReuse::forgotten(uint64_t base) noexcept {
  const std::lock_guard lock(mutex_);
  live_.erase(base);
}

uint64_t StreamOrderedReuse::keep(int device, uint64_t base, uint64_t granules, uint64_t stream,
                                  uint64_t limit) noexcept {
  const std::lock_guard lock(mutex_);
  const auto live = live_.find(base);
  if (live == live_.end()) return 0;
  const uint64_t ticket = next_ticket_;
  try {
    if (kept_granules_[device] + granules > limit) {
      live_.erase(live);
      return 0;
    }
    kept_[Size{device, granules}].emplace(ticket, Kept{.base = base, .stream = stream});
    size_of_.emplace(ticket, Size{device, granules});
  } catch (const std::bad_alloc&) {
    if (const auto bucket = kept_.find(Size{device, granules}); bucket != kept_.end())
      bucket->second.erase(ticket);
    live_.erase(live);
    return 0;
  }
  ++next_ticket_;
  live_.erase(live);
  kept_granules_[device] += granules;  // made above
  stats_.kept_granules += granules;
  return ticket;
}

void StreamOrderedReuse::reached(uint64_t ticket) noexcept {
  const std::lock_guard lock(mutex_);
  const auto size = size_of_.find(ticket);
  if (size == size_of_.end()) return;  // taken, given up or withdrawn meanwhile
  const auto bucket = kept_.find(size->second);
  const auto kept = bucket->second.find(ticket);
  if (kept != bucket->second.end()) reached_locked(kept->second);
}

void StreamOrderedReuse::reached_locked(Kept& kept) {
  kept.reached = true;
  try {
    dead_.insert(kept.base);
  } catch (const std::bad_alloc&) {
    // Its bytes are copied when it moves, as a live block's are.
  }
}

StreamOrderedReuse::Unreached StreamOrderedReuse::unreached_streams(
    int device, std::size_t most) const noexcept {
  Unreached unreached;
  std::vector<uint64_t>& streams = unreached.streams;
  const std::lock_guard lock(mutex_);
  unreached.later_tickets = next_ticket_;
  try {
    for (const auto& [size, bucket] : kept_) {
      if (size.first != device) continue;
      for (const auto& [ticket, kept] : bucket) {
        if (kept.reached || kept.stream == kNoStream ||
            std::find(streams.begin(), streams.end(), kept.stream) != streams.end())
          continue;
        if (streams.size() == most) return unreached;
        streams.push_back(kept.stream);
      }
    }
  } catch (const std::bad_alloc&) {
    // The streams found so far.
  }
  return unreached;
}

void StreamOrderedReuse::stream_idle(uint64_t stream, uint64_t later_tickets) noexcept {
  const std::lock_guard lock(mutex_);
  for (auto& [size, bucket] : kept_)
    for (auto& [ticket, kept] : bucket)
      if (kept.stream == stream && !kept.reached && ticket < later_tickets) reached_locked(kept);
}

std::optional<StreamOrderedReuse::Block> StreamOrderedReuse::withdraw(uint64_t ticket) noexcept {
  const std::lock_guard lock(mutex_);
  const auto size = size_of_.find(ticket);
  if (size == size_of_.end()) return std::nullopt;
  const auto bucket = kept_.find(size->second);
  const auto kept = bucket->second.find(ticket);
  const Block block{.base = kept->second.base, .granules = bucket->first.second};
  erase_locked(bucket, kept);
  return block;
}

std::optional<StreamOrderedReuse::Taken> StreamOrderedReuse::take(int device, uint64_t granules,
                                                                  uint64_t stream) noexcept {
  const std::lock_guard lock(mutex_);
  const auto bucket = kept_.find(Size{device, granules});
  if (bucket == kept_.end()) return std::nullopt;
  // Note [Reuse in stream order]: the oldest of the request's own stream, else the oldest reached.
  auto chosen = bucket->second.end();
  for (auto kept = bucket->second.begin(); kept != bucket->second.end(); ++kept) {
    if (kept->second.stream == stream) {
      chosen = kept;
      break;
    }
    if (kept->second.reached && chosen == bucket->second.end()) chosen = kept;
  }
  if (chosen == bucket->second.end()) return std::nullopt;
  const Taken taken{.base = chosen->second.base,
                    .reached = chosen->second.reached,
                    .same_stream = chosen->second.stream == stream};
  const uint64_t base = taken.base;
  try {
    live_.insert(base);
  } catch (const std::bad_alloc&) {
    return std::nullopt;  // stays kept; the request makes a block of its own
  }
  ++(taken.same_stream ? stats_.same_stream : stats_.other_stream);
  erase_locked(bucket, chosen);
  return taken;
}

void StreamOrderedReuse::give_up_taken(const Taken& taken) noexcept {
  const std::lock_guard lock(mutex_);
  live_.erase(taken.base);
  --(taken.same_stream ? stats_.same_stream : stats_.other_stream);
  ++stats_.given_up;
}

std::vector<StreamOrderedReuse::Block> StreamOrderedReuse::oldest_reached(
    int device, uint64_t granules) const noexcept {
  std::vector<std::pair<uint64_t, Block>> reached;  // by ticket: the oldest first
  std::vector<Block> oldest;
  const std::lock_guard lock(mutex_);
  try {
    for (const auto& [size, bucket] : kept_) {
      if (size.first != device) continue;
      for (const auto& [ticket, kept] : bucket) {
        if (kept.reached)
          reached.emplace_back(ticket, Block{.base = kept.base, .granules = size.second});
      }
    }
    std::ranges::sort(reached, {}, &std::pair<uint64_t, Block>::first);
    uint64_t held = 0;
    for (const auto& [ticket, block] : reached) {
      if (held >= granules) break;
      oldest.push_back(block);
      held += block.granules;
    }
  } catch (const std::bad_alloc&) {
    return {};
  }
  return oldest;
}

std::vector<uint64_t> StreamOrderedReuse::reached_blocks() const noexcept {
  const std::lock_guard lock(mutex_);
  try {
    return {dead_.begin(), dead_.end()};
  } catch (const std::bad_alloc&) {
    return {};
  }
}

bool StreamOrderedReuse::is_reached(uint64_t base) const noexcept {
  const std::lock_guard lock(mutex_);
  return dead_.contains(base);
}

bool StreamOrderedReuse::give_up_if_reached(uint64_t base) noexcept {
  const std::lock_guard lock(mutex_);
  if (!dead_.contains(base)) return false;
  for (auto bucket = kept_.begin(); bucket != kept_.end(); ++bucket) {
    for (auto kept = bucket->second.begin(); kept != bucket->second.end(); ++kept) {
      if (kept->second.base != base) continue;
      erase_locked(bucket, kept);
      ++stats_.given_up;
      return true;
    }
  }
  return false;
}

std::vector<uint64_t> StreamOrderedReuse::stream_ended(uint64_t stream) noexcept {
  std::vector<uint64_t> unreached;
  const std::lock_guard lock(mutex_);
  for (auto& [size, bucket] : kept_) {
    for (auto& [ticket, kept] : bucket) {
      if (kept.stream != stream) continue;
      kept.stream = kNoStream;
      if (kept.reached) continue;
      try {
        unreached.push_back(ticket);
      } catch (const std::bad_alloc&) {
        // Left to the host function queued at its free.
      }
    }
  }
  return unreached;
}

void StreamOrderedReuse::all_streams_ended() noexcept {
  const std::lock_guard lock(mutex_);
  for (auto& [size, bucket] : kept_)
    for (auto& [ticket, kept] : bucket) kept.stream = kNoStream;
}

std::vector<StreamOrderedReuse::Block> StreamOrderedReuse::withdraw_all(int device) noexcept {
  std::vector<Block> withdrawn;
  const std::lock_guard lock(mutex_);
  for (auto bucket = kept_.begin(); bucket != kept_.end(); ++bucket) {
    if (bucket->first.first != device) continue;
    while (!bucket->second.empty()) {
      const auto kept = bucket->second.begin();
      try {
        withdrawn.push_back({.base = kept->second.base, .granules = bucket->first.second});
      } catch (const std::bad_alloc&) {  // the rest stay kept, and charged
        return withdrawn;
      }
      erase_locked(bucket, kept);
    }
  }
  return withdrawn;
}

bool StreamOrderedReuse::dead(uint64_t base) const noexcept {
  const std::lock_guard lock(mutex_);
  return dead_.contains(base);
}

StreamOrderedReuseStats StreamOrderedReuse::stats() const noexcept {
  const std::lock_guard lock(mutex_);
  return stats_;
}

void StreamOrderedReuse::erase_locked(std::map<Size, Bucket>::iterator bucket,
                                      Bucket::iterator kept) {
  const uint64_t granules = bucket->first.second;
  kept_granules_[bucket->first.first] -= granules;
  stats_.kept_granules -= granules;
  size_of_.erase(kept->first);
  dead_.erase(kept->second.base);
  // Empty buckets are left: a job's sizes recur, and keeping them saves the map's allocations.
  bucket->second.erase(kept);
}

}  // namespace vramspill::tiers
