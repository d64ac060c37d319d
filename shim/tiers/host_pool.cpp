#include "tiers/host_pool.h"

#include <algorithm>
#include <bit>
#include <iterator>

#include "util/quiet_thread.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kMinGranularity = 256;  // cuMemAlloc's alignment promise
constexpr uint64_t kPageBytes = 4096;
// An idle region of its own is reused for a block it exceeds by at most 1/kCloseFit of the block.
constexpr uint64_t kCloseFit = 8;

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
  // Never above a step: then every idle step holds any shared block (Note [Regions of their own
  // for large blocks]).
  if (options_.own_region_above == 0) options_.own_region_above = options_.step_bytes / 4;
  options_.own_region_above = std::min(options_.own_region_above, options_.step_bytes);
}

HostPool::~HostPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  grower_wake_.notify_all();
  if (grower_.joinable()) grower_.join();
  for (const auto& [start, region] : regions_) unpin(region);
  for (const Region& unusable : unusable_pins_) unpin(unusable);
}

uint64_t HostPool::round_up(uint64_t bytes) const noexcept {
  const uint64_t mask = options_.granularity - 1;
  if (bytes > (uint64_t{1} << 62)) return 0;  // no pool holds that much: refuse
  return (bytes + mask) & ~mask;
}

void* HostPool::allocate(uint64_t bytes) noexcept {
  const uint64_t size = round_up(bytes);
  std::unique_lock lock(mutex_);
  std::optional<uint64_t> block;
  if (size > options_.own_region_above) {
    block = allocate_own_region(lock, size);
  } else if (size > 0) {
    block = allocate_shared(lock, size);
  }
  if (!block) {
    ++counters_.failed_allocations;
    return nullptr;
  }
  ++counters_.allocations;
  if (size <= options_.own_region_above) request_growth_locked();  // room ahead: shared blocks
  return reinterpret_cast<void*>(*block);
}

std::optional<uint64_t> HostPool::allocate_shared(std::unique_lock<std::mutex>& lock,
                                                  uint64_t size) noexcept {
  for (;;) {
    uint64_t block = 0;
    const Take taken = take_locked(size, block);
    if (taken == Take::kTaken) return block;
    if (taken == Take::kFailed) return std::nullopt;
    if (!unpinning_ && (pins_in_flight_ > 0 || (growth_requested_ && !held_off_))) {
      // A step is being pinned, or about to be (ahead of need, but not far enough ahead): wait
      // for it rather than pin another; but never for an unpin (Note [Unpinning off the
      // allocating thread]), nor for a background thread the driver may not be asked by now.
      ++counters_.waits_for_background_pin;
      pin_done_.wait(lock, [this] {
        return unpinning_ || (pins_in_flight_ == 0 && (!growth_requested_ || held_off_));
      });
      continue;
    }
    // The pool is truly empty for this size (Note [Pinning ahead of need]): pin here, and claim
    // the block from the new region so no other thread can take its room first. Near the host
    // limit, a whole step may not fit where the block alone does.
    const uint64_t region_bytes = std::max(size, std::min(options_.step_bytes, room_to_pin()));
    ++pins_in_flight_;
    const std::optional<uint64_t> claimed = grow(lock, region_bytes, size, Growth::kStepNow);
    --pins_in_flight_;
    pin_done_.notify_all();
    if (claimed) return claimed;
    // No new step (Note [Near the host limit]): an idle region of its own becomes shared room.
    const auto idle = idle_own_region_locked(size, UINT64_MAX);
    if (idle == regions_.end() || !share_locked(idle->second)) return std::nullopt;
  }
}

std::optional<uint64_t> HostPool::allocate_own_region(std::unique_lock<std::mutex>& lock,
                                                      uint64_t size) noexcept {
  // The closest idle region of its own that fits (kCloseFit) is taken as it is (Note [Regions of
  // their own for large blocks]).
  if (const auto idle = idle_own_region_locked(size, size / kCloseFit); idle != regions_.end())
    return reuse_locked(idle->second, size);
  if (const std::optional<uint64_t> pinned = grow(lock, size, size, Growth::kOwnRegion))
    return pinned;
  // No new region (Note [Near the host limit]): any idle memory that holds the block.
  if (const auto idle = idle_own_region_locked(size, UINT64_MAX); idle != regions_.end())
    return reuse_locked(idle->second, size);
  uint64_t block = 0;
  if (take_locked(size, block) != Take::kTaken) return std::nullopt;
  return block;
}

std::map<uint64_t, HostPool::Region>::iterator HostPool::idle_own_region_locked(
    uint64_t size, uint64_t slack) noexcept {
  auto closest = regions_.end();
  for (auto it = regions_.begin(); it != regions_.end(); ++it) {
    const Region& region = it->second;
    if (!region.own || region.used != 0 || region.bytes < size || region.bytes - size > slack)
      continue;
    if (closest == regions_.end() || region.bytes < closest->second.bytes) closest = it;
  }
  return closest;
}

std::optional<uint64_t> HostPool::reuse_locked(Region& idle, uint64_t size) noexcept {
  try {
    blocks_.emplace(idle.start, size);
  } catch (...) {
    ++counters_.internal_errors;
    return std::nullopt;
  }
  charge_locked(idle, size);
  ++counters_.own_regions_reused;
  return idle.start;
}

bool HostPool::share_locked(Region& idle) noexcept {
  try {
    free_space_.add(idle.start, idle.bytes);
  } catch (...) {
    ++counters_.internal_errors;
    return false;
  }
  idle.own = false;
  return true;
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
  if (region.used == 0) idle_bytes_ -= region.bytes;
  region.used += bytes;
  used_bytes_ += bytes;
  counters_.peak_used_bytes = std::max(counters_.peak_used_bytes, used_bytes_);
}

std::optional<uint64_t> HostPool::grow(std::unique_lock<std::mutex>& lock, uint64_t bytes,
                                       uint64_t claim, Growth growth) noexcept {
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
    ++counters_.pin_failures;
    if (base == nullptr) {
      budget_.release(pin_bytes);
    } else {
      give_back_unusable_locked(lock, base, pin_bytes, growth);
    }
    return std::nullopt;
  }

  const auto address = reinterpret_cast<uint64_t>(base);
  Region region;
  region.start = round_up(address);
  region.bytes = align_down(address + pin_bytes - region.start, granularity);
  region.pinned = base;
  region.pinned_bytes = pin_bytes;
  region.own = growth == Growth::kOwnRegion;
  bool added = false;
  if (region.bytes >= bytes) {
    try {
      const auto it = regions_.emplace(region.start, region).first;
      try {
        if (claim > 0) blocks_.emplace(region.start, claim);
        try {
          // A region of its own holds its block and nothing else: its rest is granule rounding.
          if (!region.own) free_space_.add(region.start + claim, region.bytes - claim);
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
    give_back_unusable_locked(lock, region.pinned, region.pinned_bytes, growth);
    return std::nullopt;
  }

  pinned_bytes_ += region.bytes;
  idle_bytes_ += region.bytes;
  counters_.peak_pinned_bytes = std::max(counters_.peak_pinned_bytes, pinned_bytes_);
  if (claim > 0) charge_locked(regions_.find(region.start)->second, claim);
  ++(growth == Growth::kStepAhead ? counters_.pins_ahead : counters_.pins_on_allocation_path);
  return region.start;
}

std::optional<uint64_t> HostPool::free(void* block, Unpinning unpinning) noexcept {
  const auto address = reinterpret_cast<uint64_t>(block);
  std::unique_lock lock(mutex_);
  const auto it = blocks_.find(address);
  if (it == blocks_.end()) return forget_lost_block_locked(address);
  const uint64_t size = it->second;
  blocks_.erase(it);
  ++counters_.frees;
  const Region* region = give_back_locked(address, size);
  if (region == nullptr) return size;
  // Unusable pins wait here too when the background thread cannot take them (stopped, or never
  // started).
  if ((region->used == 0 && idle_bytes_ > options_.release_idle_above) ||
      !unusable_pins_.empty()) {
    if (unpinning == Unpinning::kNow) {
      release_idle(lock);
    } else {
      request_idle_release_locked();
    }
  }
  return size;
}

std::optional<uint64_t> HostPool::forget_lost_block_locked(uint64_t address) noexcept {
  const auto lost = lost_blocks_.find(address);
  if (lost == lost_blocks_.end()) return std::nullopt;
  const uint64_t size = lost->second;
  lost_blocks_.erase(lost);
  return size;
}

HostPool::Region* HostPool::give_back_locked(uint64_t address, uint64_t size) noexcept {
  Region& region = region_of_locked(address)->second;
  if (!region.own) {
    try {
      free_space_.give_back(address, size, region.start, region.start + region.bytes);
    } catch (...) {
      ++counters_.internal_errors;  // Note [Failure inside the pool]: the range is lost
      return nullptr;
    }
    background_pin_failed_ = false;  // room came back: pinning ahead may work again
  }
  region.used -= size;
  used_bytes_ -= size;
  if (region.used == 0) idle_bytes_ += region.bytes;
  return &region;
}

uint64_t HostPool::forget_lost_regions() noexcept {
  if (ops_.gone == nullptr || ops_.forget == nullptr) return 0;
  std::unique_lock lock(mutex_);
  // A pin in flight is judged too, once it is in the books; an unpin in flight gives back what
  // it can.
  pin_done_.wait(lock, [this] { return pins_in_flight_ == 0 && !unpinning_; });
  std::erase_if(unusable_pins_, [&](const Region& unusable) {
    if (!ops_.gone(ops_.context, unusable.pinned)) return false;
    budget_.release(unusable.pinned_bytes);
    ops_.forget(ops_.context, unusable.pinned, unusable.pinned_bytes, /*held_blocks=*/false);
    return true;
  });
  uint64_t live_blocks = 0;
  for (auto found = regions_.begin(); found != regions_.end();) {
    const Region region = found->second;
    if (!ops_.gone(ops_.context, region.pinned)) {
      ++found;
      continue;
    }
    const uint64_t end = region.start + region.bytes;
    for (auto block = blocks_.lower_bound(region.start);
         block != blocks_.end() && block->first < end; block = blocks_.erase(block)) {
      ++live_blocks;
      try {
        lost_blocks_.emplace(block->first, block->second);
      } catch (const std::bad_alloc&) {  // its free will be refused: the books cannot say more
      }
    }
    free_space_.remove_within(region.start, end);
    used_bytes_ -= region.used;
    if (region.used == 0) idle_bytes_ -= region.bytes;
    pinned_bytes_ -= region.bytes;
    found = regions_.erase(found);
    // Gone, not unpinned: its bytes go back to the host budget as they are.
    budget_.release(region.pinned_bytes);
    ops_.forget(ops_.context, region.pinned, region.pinned_bytes, region.used != 0);
  }
  return live_blocks;
}

void HostPool::give_back_unusable_locked(std::unique_lock<std::mutex>& lock, void* base,
                                         uint64_t bytes, Growth growth) noexcept {
  Region unusable;
  unusable.pinned = base;
  unusable.pinned_bytes = bytes;
  if (growth == Growth::kStepAhead) {  // on the background thread: unpin now
    unpin_unlocked(lock, unusable);
    return;
  }
  try {
    unusable_pins_.push_back(unusable);
  } catch (...) {
    ++counters_.internal_errors;  // stays pinned, and counted against the host budget
    return;
  }
  request_idle_release_locked();
}

void HostPool::release_idle(std::unique_lock<std::mutex>& lock) noexcept {
  // Stopped, the background thread leaves the driver alone (stop_background_pinning()).
  const auto stopped = [this] { return stopping_ && on_background_thread(); };
  while (!unusable_pins_.empty() && !stopped()) {
    const Region unusable = unusable_pins_.back();
    unusable_pins_.pop_back();
    unpin_unlocked(lock, unusable);
  }
  while (idle_bytes_ > options_.release_idle_above && !stopped()) {
    // The largest idle region whose release keeps free room at the low-water mark, so that the
    // background thread does not pin straight back what was just unpinned (regions of their own
    // are never part of that room).
    auto victim = regions_.end();
    for (auto it = regions_.begin(); it != regions_.end(); ++it) {
      const Region& region = it->second;
      if (region.used != 0 ||
          (!region.own && free_room_locked() - region.bytes < options_.low_water_bytes)) {
        continue;
      }
      if (victim == regions_.end() || region.bytes > victim->second.bytes) victim = it;
    }
    if (victim == regions_.end()) return;
    const std::optional<Region> region = retire_locked(victim);
    if (!region) return;
    ++counters_.unpins;
    unpin_unlocked(lock, *region);
  }
}

std::optional<HostPool::Region> HostPool::retire_locked(
    std::map<uint64_t, Region>::iterator idle) noexcept {
  const Region region = idle->second;
  if (!region.own && !free_space_.remove(region.start, region.bytes)) {
    ++counters_.internal_errors;  // an idle region is one free range; never unpin live blocks
    return std::nullopt;
  }
  regions_.erase(idle);
  pinned_bytes_ -= region.bytes;
  idle_bytes_ -= region.bytes;
  return region;
}

void HostPool::unpin_unlocked(std::unique_lock<std::mutex>& lock, const Region& retired) noexcept {
  // Only the background thread's unpins are announced: an allocation never waits for them. A
  // free that unpins (Unpinning::kNow) does so on its own thread, which no allocation waits for.
  const bool announce = on_background_thread();
  if (announce) {
    unpinning_ = true;
    pin_done_.notify_all();
  }
  lock.unlock();
  unpin(retired);
  lock.lock();
  background_pin_failed_ = false;  // budget came back: pinning ahead may work again
  if (announce) {
    unpinning_ = false;
    pin_done_.notify_all();
  }
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
  pin_done_.wait(lock, [this] { return pins_in_flight_ == 0 && !unpinning_; });
}

void HostPool::warm_up() noexcept {
  std::lock_guard lock(mutex_);
  request_growth_locked();
}

void HostPool::wait_for_background_work() noexcept {
  std::unique_lock lock(mutex_);
  pin_done_.wait(lock, [this] {
    return !growth_requested_ && !release_requested_ && pins_in_flight_ == 0 && !unpinning_;
  });
}

void HostPool::grower_main() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    grower_wake_.wait(lock, [this] {
      return growth_requested_ || release_requested_ || stopping_;
    });
    if (stopping_) break;
    // What when_quiet holds off comes before the pool's lock, as on the allocating threads.
    lock.unlock();
    bool stepped = true;
    if (ops_.when_quiet == nullptr) {
      background_step();
    } else {
      stepped = ops_.when_quiet(ops_.context, &HostPool::run_background_step, this);
    }
    lock.lock();
    // Held off, the thread lets allocations that would wait for it pin for themselves.
    held_off_ = !stepped;
    if (!stepped) {
      pin_done_.notify_all();
      grower_wake_.wait_for(lock, kQuietPoll, [this] { return stopping_; });
    }
  }
  growth_requested_ = false;
  pin_done_.notify_all();
}

uint64_t HostPool::room_to_pin() const noexcept {
  uint64_t room = budget_.available();
  if (ops_.room != nullptr) room = std::min(room, ops_.room(ops_.context));
  return align_down(room, options_.granularity);
}

void HostPool::background_step() noexcept {
  std::unique_lock lock(mutex_);
  if (!stopping_) {
    if (growth_requested_) {
      // First: an allocation may be waiting for this pin.
      if (pins_in_flight_ == 0 && free_room_locked() < options_.low_water_bytes) {
        ++pins_in_flight_;
        const uint64_t step = std::min(options_.step_bytes, room_to_pin());
        const bool grown = step != 0 && grow(lock, step, 0, Growth::kStepAhead).has_value();
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
    }
  }
  pin_done_.notify_all();
}

}  // namespace vramspill::tiers
