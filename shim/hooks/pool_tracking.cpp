#include "hooks/pool_tracking.h"

#include <array>
#include <atomic>
#include <mutex>

#include "core/spin_lock.h"
#include "driver/real_driver.h"

namespace vramspill::hooks {
namespace {

// Note [Refreshing pool figures]
// A pool's reserved bytes also shrink without a call the shim sees: the driver gives a pool's
// idle memory back when the program synchronises (cuStreamSynchronize, cuEventSynchronize,
// cuCtxSynchronize; above the release threshold, which is 0 unless the program raises it), and
// cuMemPoolTrimTo and cuMemPoolDestroy are not hooked. The ledger's figure for a pool is the one
// read at its last stream-ordered allocation or free, so it can be too high: memory the driver
// has taken back would still count against the budget, and a later cuMemAlloc (of any route)
// would be refused although the device has the room. So the shim remembers the pools it has
// reported (a few per process; kTrackedPoolCount at most, later ones are only refreshed by their
// own calls) and reads their figures again where a stale one would show: before refusing a
// request for want of room, in cuMemGetInfo, and when a stream-ordered block is freed (its pool
// is not recorded with the block). A pool that no longer answers (destroyed) is forgotten.
constexpr std::size_t kTrackedPoolCount = 64;

struct TrackedPool {
  std::atomic<CUmemoryPool> pool{nullptr};  // published last, with release
  std::atomic<int> device{0};
};

// Slots fill in order and are never emptied: readers stop at the first empty one.
constinit std::array<TrackedPool, kTrackedPoolCount> tracked_pools{};
constinit core::SpinLock tracked_pools_lock;  // serialises inserts only

// lock_pool()'s locks, picked by the pool handle's bits above its (likely) alignment.
constexpr std::size_t kPoolLockCount = 16;
constinit std::array<std::mutex, kPoolLockCount> pool_locks{};

std::mutex& pool_mutex(CUmemoryPool pool) {
  const auto bits = reinterpret_cast<std::uintptr_t>(pool);
  return pool_locks[(bits >> 4 ^ bits >> 12) % kPoolLockCount];
}

// The pool's reserved bytes; 0 for a pool the driver does not know (any more).
uint64_t pool_reserved(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  cuuint64_t value = 0;
  if (get_attribute == nullptr || pool == nullptr ||
      get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
    return 0;
  return value;
}

}  // namespace

PoolUsage pool_usage(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  PoolUsage usage;
  if (get_attribute == nullptr || pool == nullptr) return usage;
  cuuint64_t value = 0;
  if (get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) == CUDA_SUCCESS)
    usage.reserved = value;
  if (get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value) == CUDA_SUCCESS)
    usage.used = value;
  return usage;
}

CUmemoryPool current_pool(int device) {
  const auto get_pool = VRAMSPILL_REAL(cuDeviceGetMemPool);
  CUmemoryPool pool = nullptr;
  if (get_pool == nullptr || get_pool(&pool, device) != CUDA_SUCCESS) return nullptr;
  return pool;
}

void track_pool(int device, CUmemoryPool pool) {
  if (pool == nullptr) return;
  for (TrackedPool& slot : tracked_pools) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) break;
    if (seen == pool) {
      slot.device.store(device, std::memory_order_relaxed);  // a reused handle may move
      return;
    }
  }
  const std::lock_guard guard(tracked_pools_lock);
  for (TrackedPool& slot : tracked_pools) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_relaxed);
    if (seen == pool) return;
    if (seen == nullptr) {
      slot.device.store(device, std::memory_order_relaxed);
      slot.pool.store(pool, std::memory_order_release);
      return;
    }
  }
}

std::unique_lock<std::mutex> lock_pool(CUmemoryPool pool) {
  return std::unique_lock(pool_mutex(pool));
}

// Note [Refreshing pool figures]. A pool in the middle of an allocation is skipped: its figure is
// settled by that allocation, and a report in between would count its growth twice.
void refresh_pools(ShimState& shim) {
  for (TrackedPool& slot : tracked_pools) {
    const CUmemoryPool pool = slot.pool.load(std::memory_order_acquire);
    if (pool == nullptr) return;
    const std::unique_lock lock(pool_mutex(pool), std::try_to_lock);
    if (!lock.owns_lock()) continue;
    shim.ledger.set_pool_reserved(slot.device.load(std::memory_order_relaxed),
                                  reinterpret_cast<uint64_t>(pool), pool_reserved(pool));
  }
}

}  // namespace vramspill::hooks
