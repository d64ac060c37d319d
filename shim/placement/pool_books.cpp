#include "placement/pool_books.h"

namespace vramspill::placement {

// Note [Refreshing pool figures]
// A pool's reserved bytes also shrink without a call the shim sees: the driver gives a pool's
// idle memory back when the program synchronises (cuStreamSynchronize, cuEventSynchronize,
// cuCtxSynchronize; above the release threshold, which is 0 unless the program raises it), and
// at cuMemPoolTrimTo (hooked only for tiered mode's kept blocks:
// placement/stream_ordered_blocks.h).
// The ledger's figure for a pool is the one
// read at its last stream-ordered allocation or free, so it can be too high: memory the driver
// has taken back would still count against the budget, and a later cuMemAlloc (of any route)
// would be refused although the device has the room. So the shim remembers the pools it has
// reported (a few per process; kTrackedPoolCount live at most, later ones are only refreshed by
// their own calls) and reads their figures again where a stale one would show: before refusing a
// request for want of room, before a tiered block that does not fit whole goes partly to the host,
// at cuMemPoolTrimTo, in cuMemGetInfo, when a stream-ordered block is freed (its pool is not
// recorded with the block), and when a launch touches blocks with host granules, before the
// policy decides what to bring in (only then: the launch path makes no driver call otherwise).
// A destroyed pool is forgotten at
// cuMemPoolDestroy. The
// same slots say which device each pool's memory is on (device_of()): pools the program creates
// are recorded at cuMemPoolCreate, the devices' default pools when first seen.

std::optional<int> PoolBooks::device_of(CUmemoryPool pool) noexcept {
  if (pool == nullptr) return std::nullopt;
  for (const TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) break;
    if (seen == pool) return slot.device.load(std::memory_order_relaxed);
  }
  const int count = queries_.device_count();
  for (int device = 0; device < count; ++device) {
    if (queries_.default_pool(device) == pool) {
      track(device, pool);
      return device;
    }
  }
  return std::nullopt;
}

void PoolBooks::created(CUmemoryPool pool, const CUmemPoolProps& props) noexcept {
  const bool on_device = props.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  track(on_device ? props.location.id : kHostLocatedPool, pool);
  // A managed pool's memory (CUDA 13) is the program's to touch from the host too.
  const bool plain = on_device && props.allocType == CU_MEM_ALLOCATION_TYPE_PINNED &&
                     props.handleTypes == CU_MEM_HANDLE_TYPE_NONE && props.maxSize == 0 &&
                     props.usage == 0;
  for (TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) return;  // past the pools tracked: not known to be plain
    if (seen == pool) {
      slot.plain.store(plain, std::memory_order_relaxed);
      slot.size_cap.store(props.maxSize, std::memory_order_relaxed);
      slot.exportable.store(props.handleTypes != CU_MEM_HANDLE_TYPE_NONE,
                            std::memory_order_relaxed);
      return;
    }
  }
}

uint64_t PoolBooks::size_cap(CUmemoryPool pool) const noexcept {
  for (const TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) return 0;
    if (seen == pool) return slot.size_cap.load(std::memory_order_relaxed);
  }
  return 0;
}

bool PoolBooks::exportable(CUmemoryPool pool) const noexcept {
  for (const TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) return false;
    if (seen == pool) return slot.exportable.load(std::memory_order_relaxed);
  }
  return false;
}

bool PoolBooks::plain(int device, CUmemoryPool pool) noexcept {
  const CUmemoryPool device_default = queries_.default_pool(device);
  if (device_default != nullptr && device_default == pool) return true;
  for (const TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) return false;
    if (seen == pool) return slot.plain.load(std::memory_order_relaxed);
  }
  return false;
}

void PoolBooks::destroyed(core::Ledger& ledger, CUmemoryPool pool) noexcept {
  if (pool == nullptr) return;
  (void)mark_destroyed(pool, true);
  const std::lock_guard held(mutex_of(pool));
  ledger.forget_pool(pool_key(pool));
}

bool PoolBooks::mark_destroyed(CUmemoryPool pool, bool destroyed) noexcept {
  bool before = false;
  for (TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) break;
    if (seen == pool) before = slot.destroyed.exchange(destroyed, std::memory_order_relaxed);
  }
  return before;
}

void PoolBooks::track(int device, CUmemoryPool pool) noexcept {
  if (pool == nullptr) return;
  for (TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) break;
    if (seen == pool) {
      // A destroyed pool's handle handed out again: a live pool, which may be elsewhere.
      slot.device.store(device, std::memory_order_relaxed);
      slot.destroyed.store(false, std::memory_order_relaxed);
      return;
    }
  }
  const std::lock_guard guard(inserting_);
  TrackedPool* reusable = nullptr;  // the first slot of a destroyed pool
  for (TrackedPool& slot : tracked_) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_relaxed);
    if (seen == pool) return;
    if (seen == nullptr) {
      slot.device.store(device, std::memory_order_relaxed);
      slot.pool.store(pool, std::memory_order_release);
      return;
    }
    if (reusable == nullptr && slot.destroyed.load(std::memory_order_relaxed)) reusable = &slot;
  }
  // Every slot taken: a destroyed pool's is given to this one (Note [Reusing a destroyed pool's
  // slot] in pool_books.h).
  if (reusable == nullptr) return;
  reusable->device.store(device, std::memory_order_relaxed);
  reusable->plain.store(false, std::memory_order_relaxed);
  reusable->size_cap.store(0, std::memory_order_relaxed);
  reusable->exportable.store(false, std::memory_order_relaxed);
  reusable->pool.store(pool, std::memory_order_release);
  reusable->destroyed.store(false, std::memory_order_release);
}

// Note [Refreshing pool figures]. A pool in the middle of an allocation is skipped: its figure is
// settled by that allocation, and a report in between would count its growth twice.
void PoolBooks::refresh(core::Ledger& ledger) noexcept {
  for (TrackedPool& slot : tracked_) {
    const CUmemoryPool pool = slot.pool.load(std::memory_order_acquire);
    if (pool == nullptr) return;
    const int device = slot.device.load(std::memory_order_relaxed);
    if (device == kHostLocatedPool || slot.destroyed.load(std::memory_order_relaxed)) continue;
    const std::unique_lock held(mutex_of(pool), std::try_to_lock);
    // Asked again under the lock, which a destroy holds through the driver's call.
    if (!held.owns_lock() || slot.destroyed.load(std::memory_order_relaxed)) continue;
    if (const std::optional<uint64_t> reserved = queries_.reserved(pool))
      ledger.set_pool_reserved(device, pool_key(pool), *reserved);
  }
}

std::mutex& PoolBooks::mutex_of(CUmemoryPool pool) noexcept {
  const auto bits = reinterpret_cast<std::uintptr_t>(pool);
  return locks_[(bits >> 4 ^ bits >> 12) % kPoolLockCount];
}

}  // namespace vramspill::placement
