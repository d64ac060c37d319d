// Every route by which a program takes device memory (DESIGN section 4), accounted in the
// ledger and held to the device budget. With [spill] mode = "off" an allocation over the budget
// returns CUDA_ERROR_OUT_OF_MEMORY and the log says who holds what.
//
// Each hook: enter (Note [Entering the shim]); without shim state, forward untouched. Otherwise
// admit, call the driver, settle the admission (Note [Reservation protocol] in core/ledger.h).
// Arguments are never dereferenced before the driver has checked them: a NULL or invalid
// argument gets the driver's own error, and the reservation is cancelled. A NULL output pointer
// goes straight to the driver, so that even a request over the budget gets the driver's error.
#include <array>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>

#include "core/spin_lock.h"
#include "hooks/hook.h"
#include "util/array_format.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"

using vramspill::core::Admission;
using vramspill::core::KeySpace;
using vramspill::core::Route;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

// The device of the calling thread's current context; nullopt without one (the driver will
// refuse the allocation itself, so the ledger stays out of it).
std::optional<int> current_device() {
  const auto get_device = VRAMSPILL_REAL(cuCtxGetDevice);
  CUdevice device = 0;
  if (get_device == nullptr || get_device(&device) != CUDA_SUCCESS) return std::nullopt;
  return device;
}

// Tells the ledger a device's limit the first time the device is seen. A bit per device keeps
// this to one relaxed load afterwards.
std::atomic<uint64_t> known_devices{0};

void know_device(ShimState& shim, int device) {
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (known_devices.load(std::memory_order_relaxed) & bit) != 0) return;
  const auto total_memory = VRAMSPILL_REAL(cuDeviceTotalMem_v2);
  size_t total = 0;
  if (total_memory == nullptr || total_memory(&total, device) != CUDA_SUCCESS) return;
  shim.ledger.set_device(device, total, shim.config.device.limit(total));
  known_devices.fetch_or(bit, std::memory_order_relaxed);
}

struct Allocated {
  uint64_t key = 0;    // what the matching free names: pointer, VMM handle or CUarray
  uint64_t bytes = 0;  // what the driver really took
};

// Re-reads the figures of the pools the shim has seen (Note [Refreshing pool figures]).
void refresh_pools(ShimState& shim);

// Admission, the driver call and its settlement. `allocate(Allocated&)` calls the driver;
// `after_success` runs between the driver call and on_allocated (pools report their growth there).
template <typename Allocate, typename AfterSuccess>
CUresult admit_and_allocate(ShimState& shim, int device, Route route, uint64_t bytes,
                            uint64_t pool_free_reserved, Allocate allocate,
                            AfterSuccess after_success) {
  know_device(shim, device);
  // Note [Refreshing pool figures]: before a request is refused for want of room, make sure
  // the room is not taken by memory the pools have already given back.
  constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  if (bytes > shim.ledger.budget_view(device, kUnknown, kUnknown).free_bytes)
    refresh_pools(shim);
  const Admission admission = shim.ledger.admit(device, route, bytes, pool_free_reserved);
  if (!admission.admitted) {
    // The refusal names the route itself: "cuMemAlloc of 1.0 GiB (...) on device 0 refused: ...".
    vramspill::logging::limited(vramspill::LogLevel::kWarn, vramspill::RateKey::kOverBudget, "{}",
                                admission.refusal);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocated allocated{.key = 0, .bytes = bytes};
  const CUresult result = allocate(allocated);
  if (result != CUDA_SUCCESS) {
    shim.ledger.cancel(admission);
    return result;
  }
  after_success();
  shim.ledger.on_allocated(admission, allocated.key, allocated.bytes);
  return result;
}

template <typename Allocate>
CUresult admit_and_allocate(ShimState& shim, int device, Route route, uint64_t bytes,
                            Allocate allocate) {
  return admit_and_allocate(shim, device, route, bytes, 0, allocate, [] {});
}

// A stream-ordered pool's reserved and handed-out bytes (Note [Stream-ordered pools in the
// budget] in core/ledger.h).
struct PoolUsage {
  uint64_t reserved = 0;
  uint64_t used = 0;
};

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
constinit vramspill::core::SpinLock tracked_pools_lock;  // serialises inserts only

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

// The pool's reserved bytes; 0 for a pool the driver does not know (any more).
uint64_t pool_reserved(CUmemoryPool pool) {
  const auto get_attribute = VRAMSPILL_REAL(cuMemPoolGetAttribute);
  cuuint64_t value = 0;
  if (get_attribute == nullptr || pool == nullptr ||
      get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) != CUDA_SUCCESS)
    return 0;
  return value;
}

void report_pool(ShimState& shim, int device, CUmemoryPool pool) {
  if (pool == nullptr) return;
  track_pool(device, pool);
  shim.ledger.set_pool_reserved(device, reinterpret_cast<uint64_t>(pool), pool_reserved(pool));
}

// Note [Refreshing pool figures].
void refresh_pools(ShimState& shim) {
  for (TrackedPool& slot : tracked_pools) {
    const CUmemoryPool pool = slot.pool.load(std::memory_order_acquire);
    if (pool == nullptr) return;
    shim.ledger.set_pool_reserved(slot.device.load(std::memory_order_relaxed),
                                  reinterpret_cast<uint64_t>(pool), pool_reserved(pool));
  }
}

// `call` is the driver's allocation; `pool` is null for kMemAllocAsync (the device's current pool).
template <typename Call>
CUresult pool_allocation(Route route, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                         Call call) {
  if (dptr == nullptr) return call();  // the driver's error, whatever the budget would say
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) return call();
  if (route == Route::kMemAllocAsync) pool = current_pool(*device);
  const PoolUsage before = pool_usage(pool);
  return admit_and_allocate(
      *shim, *device, route, bytesize,
      before.reserved > before.used ? before.reserved - before.used : 0,
      [&](Allocated& allocated) {
        const CUresult result = call();
        if (result == CUDA_SUCCESS) allocated.key = *dptr;
        return result;
      },
      [&] { report_pool(*shim, *device, pool); });
}

// Frees: the ledger forgets the allocation before the driver has it back (another thread may
// get the same address at once).
template <typename Free>
CUresult forget_then_free(uint64_t key, KeySpace space, Free free) {
  const Entry entry;
  if (ShimState* shim = entry.state()) {
    const auto forgotten = shim->ledger.on_freed(key, space);
    const CUresult result = free();
    // The block's pool is not recorded (it may be an explicit one, not the device's current
    // pool): read every pool's figure again (Note [Refreshing pool figures]).
    if (forgotten && vramspill::core::is_pool_route(forgotten->route)) refresh_pools(*shim);
    return result;
  }
  return free();
}

// For formats without a plain per-channel size (block-compressed, planar) one byte per channel
// is a lower bound.
uint64_t array_bytes(size_t width, size_t height, size_t depth, unsigned int channels,
                     CUarray_format format) {
  const auto at_least_one = [](uint64_t extent) { return extent == 0 ? uint64_t{1} : extent; };
  return uint64_t{width} * at_least_one(height) * at_least_one(depth) * channels *
         std::max<uint64_t>(vramspill::array_channel_bytes(format), 1);
}

template <typename Create>
CUresult array_creation(CUarray* handle, uint64_t bytes, Create create) {
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) return create();
  return admit_and_allocate(*shim, *device, Route::kArray, bytes, [&](Allocated& allocated) {
    const CUresult result = create();
    if (result == CUDA_SUCCESS) allocated.key = reinterpret_cast<uint64_t>(*handle);
    return result;
  });
}

template <typename Allocate>
CUresult linear_allocation(Route route, uint64_t bytes, Allocate allocate) {
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) {
    Allocated ignored;
    return allocate(ignored);
  }
  return admit_and_allocate(*shim, *device, route, bytes, allocate);
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuInit(unsigned int Flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuInit);
  if (vramspill::hooks::configuration_error() != nullptr) return CUDA_ERROR_INVALID_VALUE;
  return real(Flags);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAlloc_v2);
  if (dptr == nullptr) return real(dptr, bytesize);  // the driver's error, before any budget
  return linear_allocation(Route::kMemAlloc, bytesize, [&](Allocated& allocated) {
    const CUresult result = real(dptr, bytesize);
    if (result == CUDA_SUCCESS) allocated.key = *dptr;
    return result;
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                   size_t WidthInBytes, size_t Height,
                                                   unsigned int ElementSizeBytes) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocPitch_v2);
  if (dptr == nullptr || pPitch == nullptr)  // the driver's error, before any budget
    return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  // Admitted at the unpadded size; the ledger then records pitch x height (what was taken).
  return linear_allocation(
      Route::kMemAllocPitch, uint64_t{WidthInBytes} * Height, [&](Allocated& allocated) {
        const CUresult result = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
        if (result == CUDA_SUCCESS) {
          allocated.key = *dptr;
          allocated.bytes = uint64_t{*pPitch} * Height;
        }
        return result;
      });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                  unsigned int flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocManaged);
  if (dptr == nullptr) return real(dptr, bytesize, flags);  // the driver's error
  return linear_allocation(Route::kMemAllocManaged, bytesize, [&](Allocated& allocated) {
    const CUresult result = real(dptr, bytesize, flags);
    if (result == CUDA_SUCCESS) allocated.key = *dptr;
    return result;
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocAsync);
  return pool_allocation(Route::kMemAllocAsync, dptr, bytesize, nullptr,
                         [&] { return real(dptr, bytesize, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                     CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocAsync_ptsz);
  return pool_allocation(Route::kMemAllocAsync, dptr, bytesize, nullptr,
                         [&] { return real(dptr, bytesize, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                        CUmemoryPool pool, CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocFromPoolAsync);
  return pool_allocation(Route::kMemAllocFromPoolAsync, dptr, bytesize, pool,
                         [&] { return real(dptr, bytesize, pool, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                             CUmemoryPool pool,
                                                             CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocFromPoolAsync_ptsz);
  return pool_allocation(Route::kMemAllocFromPoolAsync, dptr, bytesize, pool,
                         [&] { return real(dptr, bytesize, pool, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFree_v2);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFreeAsync);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFreeAsync_ptsz);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr, hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                            const CUmemAllocationProp* prop,
                                            unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemCreate);
  const auto create = [&] { return real(handle, size, prop, flags); };
  // Host-located physical memory takes no device memory: only device locations are budgeted.
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || prop == nullptr || handle == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return create();
  return admit_and_allocate(*shim, prop->location.id, Route::kMemCreate, size,
                            [&](Allocated& allocated) {
                              const CUresult result = create();
                              if (result == CUDA_SUCCESS) allocated.key = *handle;
                              return result;
                            });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemRelease);
  return forget_then_free(handle, KeySpace::kVmmHandle, [&] { return real(handle); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle,
                                                 const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArrayCreate_v2);
  const auto create = [&] { return real(pHandle, pAllocateArray); };
  if (pHandle == nullptr || pAllocateArray == nullptr) return create();
  const CUDA_ARRAY_DESCRIPTOR& d = *pAllocateArray;
  return array_creation(pHandle, array_bytes(d.Width, d.Height, 1, d.NumChannels, d.Format),
                        create);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle,
                                                   const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArray3DCreate_v2);
  const auto create = [&] { return real(pHandle, pAllocateArray); };
  if (pHandle == nullptr || pAllocateArray == nullptr) return create();
  const CUDA_ARRAY3D_DESCRIPTOR& d = *pAllocateArray;
  return array_creation(pHandle,
                        array_bytes(d.Width, d.Height, d.Depth, d.NumChannels, d.Format), create);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  VRAMSPILL_REAL_OR_RETURN(real, cuArrayDestroy);
  return forget_then_free(reinterpret_cast<uint64_t>(hArray), KeySpace::kArray,
                          [&] { return real(hArray); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemGetInfo_v2);
  const CUresult result = real(free, total);
  if (result != CUDA_SUCCESS) return result;  // NULL outputs included: the driver checked them
  const Entry entry;
  ShimState* shim = entry.state();
  const std::optional<int> device = shim != nullptr ? current_device() : std::nullopt;
  if (!device) return result;
  know_device(*shim, *device);
  refresh_pools(*shim);  // Note [Refreshing pool figures]
  const vramspill::core::MemInfo view = shim->ledger.budget_view(*device, *free, *total);
  *free = view.free_bytes;
  *total = view.total_bytes;
  return result;
}
