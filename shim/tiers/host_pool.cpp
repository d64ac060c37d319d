#include "tiers/host_pool.h"

#include <algorithm>
#include <bit>
#include <iterator>
#include <span>
#include <vector>

#include "util/quiet_thread.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kMinGranularity = 256;  // cuMemAlloc's alignment promise
constexpr uint64_t kPageBytes = 4096;

uint64_t align_down(uint64_t value, uint64_t alignment) { return value & ~(alignment - 1); }

}  // namespace

HostPool::HostPool(HostPoolOptions options, PinnedMemoryOps ops, core::HostBudget& budget) noexcept
    : options_(options), ops_(ops), budget_(budget) {
  // Past 2^62 no request can be met anyway; the clamp keeps every sum below from overflowing.
  constexpr uint64_t kLargest = uint64_t{1} << 62;
  options_.granularity = std::bit_ceil(std::clamp(options_.granularity, kMinGranularity,
                                                  uint64_t{1} << 30));
  options_.step_bytes = std::max(round_up(std::min(options_.step_bytes, kLargest)),
                                 options_.granularity);
  if (options_.low_water_bytes == 0) options_.low_water_bytes = options_.step_bytes / 2;
}

HostPool::~HostPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  grower_wake_.notify_all();
  if (grower_.joinable()) grower_.join();
  for (const auto& [start, region] : regions_) unpin(region);
}

uint64_t HostPool::round_up(uint64_t bytes) const noexcept {
  const uint64_t mask = options_.granularity - 1;
  if (bytes > (uint64_t{1} << 62)) return 0;  // no pool holds that much: refuse
  return (bytes + mask) & ~mask;
}

void* HostPool::allocate(uint64_t bytes) noexcept {
  const uint64_t size = round_up(bytes);
  std::unique_lock lock(mutex_);
  if (size == 0) {
    ++counters_.failed_allocations;
    return nullptr;
  }
  uint64_t block = 0;
  for (;;) {
    const Take taken = take_locked(size, block);
    if (taken == Take::kTaken) break;
    if (taken == Take::kFailed) {
      ++counters_.failed_allocations;
      return nullptr;
    }
    // No room while memory sits idle: the program's demand does not fit the shape of its idle
    // regions (Note [Consolidating idle regions in the background]).
    if (idle_bytes_ > 0) idle_too_scattered_ = true;
    const bool own_region = size > options_.step_bytes;
    if (!own_region && !unpinning_ && (pins_in_flight_ > 0 || growth_requested_)) {
      // A step is being pinned, or about to be (ahead of need, but not far enough ahead): wait
      // for it rather than pin another; but never for an unpin (Note [Consolidating idle
      // regions in the background]).
      ++counters_.waits_for_background_pin;
      pin_done_.wait(lock, [this] {
        return unpinning_ || (pins_in_flight_ == 0 && !growth_requested_);
      });
      continue;
    }
    // The pool is truly empty for this size (Note [Pinning ahead of need]): pin here, and claim
    // the block from the new region so no other thread can take its room first.
    uint64_t region_bytes = size;
    if (!own_region) {
      // Near the host limit, a whole step may not fit where the block alone does.
      const uint64_t available = align_down(budget_.available(), options_.granularity);
      region_bytes = std::max(size, std::min(options_.step_bytes, available));
      ++pins_in_flight_;
    }
    const std::optional<uint64_t> claimed = grow(lock, region_bytes, size, /*ahead=*/false);
    if (!own_region) {
      --pins_in_flight_;
      pin_done_.notify_all();
    }
    if (!claimed) {
      ++counters_.failed_allocations;
      return nullptr;
    }
    block = *claimed;
    break;
  }
  ++counters_.allocations;
  request_growth_locked();
  request_consolidation_locked();
  return reinterpret_cast<void*>(block);
}

HostPool::Take HostPool::take_locked(uint64_t bytes, uint64_t& block) noexcept {
  const std::optional<uint64_t> start = free_space_.take(bytes);
  if (!start) return Take::kNoRoom;
  try {
    blocks_.emplace(*start, bytes);
  } catch (...) {
    ++counters_.internal_errors;
    const auto region = region_of_locked(*start);
    try {
      free_space_.give_back(*start, bytes, region->second.start,
                            region->second.start + region->second.bytes);
    } catch (...) {
      charge_locked(region->second, bytes);  // leaked: stays counted as used
    }
    return Take::kFailed;
  }
  charge_locked(region_of_locked(*start)->second, bytes);
  block = *start;
  return Take::kTaken;
}

void HostPool::charge_locked(Region& region, uint64_t bytes) noexcept {
  if (region.used == 0) {
    idle_bytes_ -= region.bytes;
    --idle_regions_;
  }
  region.used += bytes;
  used_bytes_ += bytes;
  counters_.peak_used_bytes = std::max(counters_.peak_used_bytes, used_bytes_);
}

std::optional<uint64_t> HostPool::grow(std::unique_lock<std::mutex>& lock, uint64_t bytes,
                                       uint64_t claim, bool ahead) noexcept {
  const uint64_t granularity = options_.granularity;
  // pin() promises page alignment; a coarser granularity may lose up to a granule at the start.
  const uint64_t pin_bytes = bytes + (granularity > kPageBytes ? granularity : 0);
  if (!budget_.try_reserve(pin_bytes)) {
    ++counters_.budget_refusals;
    return std::nullopt;
  }
  lock.unlock();
  void* base = nullptr;
  const bool pinned = ops_.pin(ops_.context, pin_bytes, &base) && base != nullptr;
  lock.lock();
  if (!pinned) {
    budget_.release(pin_bytes);
    ++counters_.pin_failures;
    return std::nullopt;
  }

  const auto address = reinterpret_cast<uint64_t>(base);
  Region region;
  region.start = round_up(address);
  region.bytes = align_down(address + pin_bytes - region.start, granularity);
  region.pinned = base;
  region.pinned_bytes = pin_bytes;
  bool added = false;
  if (region.bytes >= bytes) {
    try {
      const auto it = regions_.emplace(region.start, region).first;
      try {
        if (claim > 0) blocks_.emplace(region.start, claim);
        try {
          free_space_.add(region.start + claim, region.bytes - claim);
        } catch (...) {
          blocks_.erase(region.start);
          throw;
        }
      } catch (...) {
        regions_.erase(it);
        throw;
      }
      added = true;
    } catch (...) {
    }
  }
  if (!added) {
    ++counters_.internal_errors;
    lock.unlock();
    unpin(region);
    lock.lock();
    return std::nullopt;
  }

  pinned_bytes_ += region.bytes;
  idle_bytes_ += region.bytes;
  ++idle_regions_;
  counters_.peak_pinned_bytes = std::max(counters_.peak_pinned_bytes, pinned_bytes_);
  if (claim > 0) charge_locked(regions_.find(region.start)->second, claim);
  ++(ahead ? counters_.pins_ahead : counters_.pins_on_allocation_path);
  return region.start;
}

std::optional<uint64_t> HostPool::free(void* block, Unpinning unpinning) noexcept {
  const auto address = reinterpret_cast<uint64_t>(block);
  std::unique_lock lock(mutex_);
  const auto it = blocks_.find(address);
  if (it == blocks_.end()) return std::nullopt;
  const uint64_t size = it->second;
  blocks_.erase(it);
  ++counters_.frees;
  Region& region = region_of_locked(address)->second;
  try {
    free_space_.give_back(address, size, region.start, region.start + region.bytes);
  } catch (...) {
    ++counters_.internal_errors;  // Note [Failure inside the pool]: the range is lost
    return size;
  }
  region.used -= size;
  used_bytes_ -= size;
  background_pin_failed_ = false;  // room came back: pinning ahead may work again
  if (region.used == 0) {
    idle_bytes_ += region.bytes;
    ++idle_regions_;
    if (idle_bytes_ > options_.release_idle_above) {
      if (unpinning == Unpinning::kNow) {
        release_idle(lock);
      } else {
        request_idle_release_locked();
      }
    }
    request_consolidation_locked();
  }
  return size;
}

void HostPool::release_idle(std::unique_lock<std::mutex>& lock) noexcept {
  while (idle_bytes_ > options_.release_idle_above) {
    // The largest idle region whose release keeps free room at the low-water mark, so that the
    // background thread does not pin straight back what was just unpinned.
    auto victim = regions_.end();
    for (auto it = regions_.begin(); it != regions_.end(); ++it) {
      const Region& region = it->second;
      if (region.used != 0 || free_room_locked() - region.bytes < options_.low_water_bytes) {
        continue;
      }
      if (victim == regions_.end() || region.bytes > victim->second.bytes) victim = it;
    }
    if (victim == regions_.end()) return;
    const std::optional<Region> region = retire_locked(victim);
    if (!region) return;
    unpin_unlocked(lock, std::span(&*region, 1));
  }
}

std::optional<HostPool::Region> HostPool::retire_locked(
    std::map<uint64_t, Region>::iterator idle) noexcept {
  const Region region = idle->second;
  if (!free_space_.remove(region.start, region.bytes)) {
    ++counters_.internal_errors;  // an idle region is one free range; never unpin live blocks
    return std::nullopt;
  }
  regions_.erase(idle);
  pinned_bytes_ -= region.bytes;
  idle_bytes_ -= region.bytes;
  --idle_regions_;
  ++counters_.unpins;
  return region;
}

void HostPool::unpin_unlocked(std::unique_lock<std::mutex>& lock,
                              std::span<const Region> retired) noexcept {
  // Only the background thread's unpins are announced: an allocation never waits for them. A
  // free that unpins (Unpinning::kNow) does so on its own thread, which no allocation waits for.
  const bool announce = std::this_thread::get_id() == grower_.get_id();
  if (announce) {
    unpinning_ = true;
    pin_done_.notify_all();
  }
  lock.unlock();
  for (const Region& region : retired) unpin(region);
  lock.lock();
  if (announce) unpinning_ = false;
}

bool HostPool::worth_consolidating_locked() const noexcept {
  if (idle_regions_ < 2) return false;
  uint64_t largest = 0;
  for (const auto& [start, region] : regions_) {
    if (region.used == 0) largest = std::max(largest, region.bytes);
  }
  return idle_bytes_ - largest >= options_.step_bytes;
}

void HostPool::consolidate_idle(std::unique_lock<std::mutex>& lock) noexcept {
  if (!worth_consolidating_locked()) return;
  std::vector<Region> retired;
  try {
    retired.reserve(idle_regions_);
  } catch (...) {
    return;  // no room for the list: the regions stay as they are
  }
  uint64_t bytes = 0;
  for (auto it = regions_.begin(); it != regions_.end();) {
    const auto idle = it++;
    if (idle->second.used != 0) continue;
    const std::optional<Region> region = retire_locked(idle);
    if (!region) continue;
    retired.push_back(*region);
    bytes += region->bytes;
  }
  if (retired.empty()) return;
  ++counters_.consolidations;
  unpin_unlocked(lock, retired);
  if (stopping_) return;
  ++pins_in_flight_;
  const bool grown = grow(lock, bytes, 0, /*ahead=*/true).has_value();
  --pins_in_flight_;
  if (!grown) background_pin_failed_ = true;
  // Regions freed meanwhile were not worth it on their own; with the new one they may be.
  consolidation_requested_ = grown && !stopping_ && worth_consolidating_locked();
}

void HostPool::unpin(const Region& region) noexcept {
  // Memory the system did not take back is still pinned: it stays counted against the host
  // budget (leaked, but never forgotten).
  if (ops_.unpin(ops_.context, region.pinned, region.pinned_bytes)) {
    budget_.release(region.pinned_bytes);
  } else {
    ++counters_.internal_errors;
  }
}

bool HostPool::owns(const void* p) const noexcept {
  const auto address = reinterpret_cast<uint64_t>(p);
  std::lock_guard lock(mutex_);
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) return false;
  --it;
  return address < it->second.start + it->second.bytes;
}

std::optional<uint64_t> HostPool::block_start(const void* p) const noexcept {
  const auto address = reinterpret_cast<uint64_t>(p);
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  if (address - it->first >= it->second) return std::nullopt;
  return it->first;
}

std::map<uint64_t, HostPool::Region>::iterator HostPool::region_of_locked(
    uint64_t address) noexcept {
  // Only called for addresses the pool handed out, which always lie in a region.
  return std::prev(regions_.upper_bound(address));
}

HostPoolStats HostPool::stats() const noexcept {
  std::lock_guard lock(mutex_);
  HostPoolStats stats = counters_;
  stats.pinned_bytes = pinned_bytes_;
  stats.used_bytes = used_bytes_;
  stats.idle_bytes = idle_bytes_;
  stats.largest_free_block = free_space_.largest();
  stats.regions = regions_.size();
  stats.live_blocks = blocks_.size();
  return stats;
}

// --- Pinning ahead of need (Note [Pinning ahead of need]) ---------------------------------------

bool HostPool::start_background_thread_locked() noexcept {
  if (stopping_) return false;  // allocations then pin on their own threads
  if (grower_.joinable()) return true;
  if (grower_failed_to_start_) return false;
  try {
    grower_ = start_quiet_thread("vramspill-pin", [this] { grower_main(); });
  } catch (...) {
    grower_failed_to_start_ = true;  // growth stays on the allocating threads
  }
  return !grower_failed_to_start_;
}

void HostPool::request_growth_locked() noexcept {
  if (!options_.grow_in_background || background_pin_failed_ || growth_requested_ ||
      pins_in_flight_ > 0 || free_room_locked() >= options_.low_water_bytes ||
      !start_background_thread_locked()) {
    return;
  }
  growth_requested_ = true;
  grower_wake_.notify_one();
}

void HostPool::request_consolidation_locked() noexcept {
  if (!options_.grow_in_background || !idle_too_scattered_ || consolidation_requested_ ||
      !worth_consolidating_locked() || !start_background_thread_locked()) {
    return;
  }
  consolidation_requested_ = true;
  grower_wake_.notify_one();
}

void HostPool::request_idle_release_locked() noexcept {
  // Without the thread the idle memory stays pinned until a free that may unpin.
  if (release_requested_ || !start_background_thread_locked()) return;
  release_requested_ = true;
  grower_wake_.notify_one();
}

void HostPool::stop_background_pinning() noexcept {
  std::unique_lock lock(mutex_);
  stopping_ = true;
  grower_wake_.notify_all();
  pin_done_.wait(lock, [this] { return pins_in_flight_ == 0; });
}

void HostPool::warm_up() noexcept {
  std::lock_guard lock(mutex_);
  request_growth_locked();
}

void HostPool::wait_for_background_work() noexcept {
  std::unique_lock lock(mutex_);
  pin_done_.wait(lock, [this] {
    return !growth_requested_ && !release_requested_ && !consolidation_requested_ &&
           pins_in_flight_ == 0 && !unpinning_;
  });
}

void HostPool::grower_main() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    grower_wake_.wait(lock, [this] {
      return growth_requested_ || release_requested_ || consolidation_requested_ || stopping_;
    });
    if (stopping_) break;
    if (growth_requested_) {
      // First: an allocation may be waiting for this pin.
      if (pins_in_flight_ == 0 && free_room_locked() < options_.low_water_bytes) {
        ++pins_in_flight_;
        const bool grown = grow(lock, options_.step_bytes, 0, /*ahead=*/true).has_value();
        --pins_in_flight_;
        if (!grown) background_pin_failed_ = true;
        // A burst of allocations may have used the new room while it was pinned: keep going.
        growth_requested_ = grown && !stopping_ && free_room_locked() < options_.low_water_bytes;
      } else {
        growth_requested_ = false;
      }
    } else if (release_requested_) {  // Note [Unpinning off the stream's callback]
      release_requested_ = false;
      release_idle(lock);
    } else {
      consolidation_requested_ = false;
      consolidate_idle(lock);
    }
    pin_done_.notify_all();
  }
  growth_requested_ = false;
  pin_done_.notify_all();
}

}  // namespace vramspill::tiers
