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
// at cuMemPoolTrimTo (hooked only for tiered mode's kept blocks: hooks/stream_ordered_tiered.h).
// The ledger's figure for a pool is the one
// read at its last stream-ordered allocation or free, so it can be too high: memory the driver
// has taken back would still count against the budget, and a later cuMemAlloc (of any route)
// would be refused although the device has the room. So the shim remembers the pools it has
// reported (a few per process; kTrackedPoolCount at most, later ones are only refreshed by their
// own calls) and reads their figures again where a stale one would show: before refusing a
// request for want of room, in cuMemGetInfo, and when a stream-ordered block is freed (its pool
// is not recorded with the block). A destroyed pool is forgotten at cuMemPoolDestroy. The
// same slots say which device each pool's memory is on (pool_device()): pools the program creates
// are recorded at cuMemPoolCreate, the devices' default pools when first seen.
constexpr std::size_t kTrackedPoolCount = 64;

struct TrackedPool {
  std::atomic<CUmemoryPool> pool{nullptr};  // published last, with release
  std::atomic<int> device{0};
  // Made by cuMemPoolCreate on the device with no exportable handle and no cap (plain_pool()).
  std::atomic<bool> plain{false};
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

// The pool's reserved bytes, if the driver says (Note [A pool figure the driver does not give]).
std::optional<uint64_t> pool_reserved(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  cuuint64_t value = 0;
  if (get_attribute == nullptr || pool == nullptr ||
      get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
    return std::nullopt;
  return value;
}

}  // namespace

std::optional<PoolUsage> pool_usage(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  const std::optional<uint64_t> reserved = pool_reserved(pool);
  cuuint64_t used = 0;
  if (!reserved || get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
    return std::nullopt;
  return PoolUsage{.reserved = *reserved, .used = used};
}

CUresult current_pool(int device, CUmemoryPool& pool) {
  const auto get_pool = VRAMSPILL_REAL(cuDeviceGetMemPool);
  const auto default_pool = VRAMSPILL_REAL(cuDeviceGetDefaultMemPool);
  if (get_pool == nullptr || default_pool == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult result = get_pool(&pool, device);
  if (result == CUDA_SUCCESS || default_pool(&pool, device) == CUDA_SUCCESS) return CUDA_SUCCESS;
  return result;
}

std::optional<int> pool_device(CUmemoryPool pool) {
  if (pool == nullptr) return std::nullopt;
  for (const TrackedPool& slot : tracked_pools) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) break;
    if (seen == pool) return slot.device.load(std::memory_order_relaxed);
  }
  const auto count_devices = VRAMSPILL_REAL(cuDeviceGetCount);
  const auto default_pool = VRAMSPILL_REAL(cuDeviceGetDefaultMemPool);
  int count = 0;
  if (count_devices == nullptr || default_pool == nullptr || count_devices(&count) != CUDA_SUCCESS)
    return std::nullopt;
  for (int device = 0; device < count; ++device) {
    CUmemoryPool candidate = nullptr;
    if (default_pool(&candidate, device) == CUDA_SUCCESS && candidate == pool) {
      track_pool(device, pool);
      return device;
    }
  }
  return std::nullopt;
}

void pool_created(CUmemoryPool pool, const CUmemPoolProps& props) {
  const bool on_device = props.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  track_pool(on_device ? props.location.id : kHostLocatedPool, pool);
  const bool plain = on_device && props.handleTypes == CU_MEM_HANDLE_TYPE_NONE &&
                     props.maxSize == 0 && props.usage == 0;
  for (TrackedPool& slot : tracked_pools) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) return;  // past the pools tracked: not known to be plain
    if (seen == pool) {
      slot.plain.store(plain, std::memory_order_relaxed);
      return;
    }
  }
}

bool plain_pool(int device, CUmemoryPool pool) {
  const auto default_pool = VRAMSPILL_REAL(cuDeviceGetDefaultMemPool);
  CUmemoryPool device_default = nullptr;
  if (default_pool != nullptr && default_pool(&device_default, device) == CUDA_SUCCESS &&
      device_default == pool)
    return true;
  for (const TrackedPool& slot : tracked_pools) {
    const CUmemoryPool seen = slot.pool.load(std::memory_order_acquire);
    if (seen == nullptr) return false;
    if (seen == pool) return slot.plain.load(std::memory_order_relaxed);
  }
  return false;
}

void pool_destroyed(ShimState& shim, CUmemoryPool pool) {
  const std::optional<int> device = pool_device(pool);
  if (!device || *device == kHostLocatedPool) return;
  const std::lock_guard lock(pool_mutex(pool));
  shim.ledger.set_pool_reserved(*device, reinterpret_cast<uint64_t>(pool), 0);
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
    const int device = slot.device.load(std::memory_order_relaxed);
    if (device == kHostLocatedPool) continue;
    const std::unique_lock lock(pool_mutex(pool), std::try_to_lock);
    if (!lock.owns_lock()) continue;
    if (const std::optional<uint64_t> reserved = pool_reserved(pool))
      shim.ledger.set_pool_reserved(device, reinterpret_cast<uint64_t>(pool), *reserved);
  }
}

}  // namespace vramspill::hooks
