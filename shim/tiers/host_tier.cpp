#include "tiers/host_tier.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <limits>
#include <new>
#include <optional>

#include "driver/context_scope.h"
#include "driver/device_work.h"
#include "driver/freed_memory.h"
#include "driver/real_driver.h"
#include "telemetry/log.h"
#include "tiers/numa_policy.h"

namespace vramspill::tiers {
namespace {

// Note [RLIMIT_MEMLOCK and the host limit]
// With the default host limit (a percent of MemAvailable) pinned memory also stays under
// RLIMIT_MEMLOCK, the administrator's cap on locked memory. NVIDIA's driver pins through its own
// kernel module, and containers often set a tiny RLIMIT_MEMLOCK (Docker: 64 KiB) that
// cuMemHostAlloc itself does not enforce; so a host limit given as a size is the user's explicit
// decision and replaces it.
uint64_t memlock_limit(const SpillConfig& config) {
  if (!config.host_limit.is_fraction()) return std::numeric_limits<uint64_t>::max();
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<uint64_t>::max();
  return limit.rlim_cur;
}

// Note [A step is at most a quarter of the host limit]
// The pool pins a whole step for its first small block, and that memory counts against the host
// limit, which managed spills share. With a step as large as the limit, one 4 MiB host spill
// would leave managed memory no room at all. So a step is at most a quarter of the limit (and at
// least 2 MiB, a PyTorch segment): the pool then takes the limit in four or more steps, as it is
// actually needed.
HostPoolOptions pool_options(const SpillConfig& config, uint64_t host_limit) {
  constexpr uint64_t kSmallestStep = uint64_t{2} << 20;
  HostPoolOptions options;
  options.step_bytes = std::min(config.host_pool_step, std::max(host_limit / 4, kSmallestStep));
  options.release_idle_above = config.host_pool_keep;
  return options;
}

// The attribute's value; nullopt when the driver does not answer.
std::optional<int> device_attribute(CUdevice_attribute attribute, int device) {
  const auto get_attribute = VRAMSPILL_REAL(cuDeviceGetAttribute);
  int value = 0;
  if (get_attribute == nullptr || get_attribute(&value, attribute, device) != CUDA_SUCCESS)
    return std::nullopt;
  return value;
}

}  // namespace

struct HostTier::PendingFree {
  HostTier* tier;
  void* block;
};

HostTier::HostTier(const SpillConfig& config, core::HostBudget& budget,
                   core::CaptureGate& captures) noexcept
    : SpillTier("the pinned host pool", core::Route::kSpillHost),
      budget_(budget),
      captures_(captures),
      memlock_limit_(memlock_limit(config)),
      pool_(pool_options(config, budget.limit()),
            PinnedMemoryOps{this, &HostTier::pin, &HostTier::unpin, &HostTier::when_quiet,
                            &HostTier::room_to_lock, &HostTier::gone, &HostTier::forget},
            budget) {}

std::optional<bool> HostTier::do_query_support(int device) noexcept {
  const std::optional<int> unified = device_attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device);
  const std::optional<int> can_map = device_attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device);
  if (!unified || !can_map) return std::nullopt;
  return *unified != 0 && *can_map != 0;
}

SpillOutcome HostTier::do_allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept {
  const uint64_t host_refusals = budget_.refusals();
  const uint64_t memlock_refusals = memlock_refusals_.load(std::memory_order_relaxed);
  const CUresult result = pool_block(request.device, request.bytes, out);
  if (result == CUDA_SUCCESS) return {};
  // The pool says only that it could not grow; the counters say which limit stopped it.
  if (memlock_refusals_.load(std::memory_order_relaxed) != memlock_refusals)
    return {.result = result, .refusal = SpillRefusal::kLockedMemoryLimit};
  if (budget_.refusals() != host_refusals)
    return {.result = result, .refusal = SpillRefusal::kHostLimit};
  return {.result = result, .refusal = SpillRefusal::kDriver};
}

void HostTier::forget_context_given_up(int device) noexcept {
  const std::lock_guard lock(context_mutex_);
  if (reference_.device != device || driver::still_held(reference_)) return;
  reference_ = {};
  context_.store(nullptr, std::memory_order_release);
}

CUresult HostTier::pool_block(int device, uint64_t bytes, CUdeviceptr* out) noexcept {
  if (context_.load(std::memory_order_acquire) == nullptr) {  // Note [The pool's context]
    const std::lock_guard lock(context_mutex_);
    if (context_.load(std::memory_order_acquire) == nullptr) {  // no other thread was first
      CUcontext primary = nullptr;
      if (driver::retain_primary(&primary, device, reference_) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
      numa_node_.store(device_attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device).value_or(-1),
                       std::memory_order_relaxed);
      context_.store(primary, std::memory_order_release);
    }
  }
  void* block = pool_.allocate(bytes);
  if (block == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = reinterpret_cast<CUdeviceptr>(block);
  return CUDA_SUCCESS;
}

std::optional<CUdeviceptr> HostTier::block_containing(CUdeviceptr address) const noexcept {
  if (pinned_bytes_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  return pool_.block_start(reinterpret_cast<const void*>(address));
}

CUresult HostTier::do_free(CUdeviceptr pointer, uint64_t /*bytes*/, int device) noexcept {
  if (!pool_.owns(reinterpret_cast<void*>(pointer))) return free_in_pool(pointer);
  const CUresult result = driver::synchronize_device(device);
  // A sticky error (a kernel faulted) is the program's to see; the block is freed anyway, as
  // the driver's cuMemFree frees memory after such an error.
  if (result != CUDA_SUCCESS && result != CUDA_ERROR_ILLEGAL_ADDRESS &&
      result != CUDA_ERROR_LAUNCH_FAILED)
    return result;
  return free_in_pool(pointer);
}

CUresult HostTier::do_free_in_stream_order(CUdeviceptr pointer, uint64_t /*bytes*/,
                                           int /*device*/, CUstream stream) noexcept {
  if (!pool_.owns(reinterpret_cast<void*>(pointer))) return free_in_pool(pointer);
  const auto launch_host_func = VRAMSPILL_REAL(cuLaunchHostFunc);
  auto* pending = new (std::nothrow) PendingFree{this, reinterpret_cast<void*>(pointer)};
  if (launch_host_func != nullptr && pending != nullptr &&
      launch_host_func(stream, &HostTier::free_from_stream, pending) == CUDA_SUCCESS)
    return CUDA_SUCCESS;
  delete pending;
  // Could not queue it: wait for the stream instead, then free.
  if (const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize)) {
    if (const CUresult result = synchronize(stream); result != CUDA_SUCCESS) return result;
  }
  return free_in_pool(pointer);
}

CUresult HostTier::free_in_pool(CUdeviceptr pointer) noexcept {
  return pool_.free(reinterpret_cast<void*>(pointer)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool HostTier::do_forget_if_lost(CUdeviceptr pointer, uint64_t /*bytes*/) noexcept {
  pool_.free(reinterpret_cast<void*>(pointer), HostPool::Unpinning::kLater);
  return true;
}

void CUDA_CB HostTier::free_from_stream(void* pending_block) {
  // Runs on the driver's callback thread, which must not call CUDA: unpinning (cuMemFreeHost) is
  // left to the pool's background thread (Note [Unpinning off the stream's callback]).
  auto* pending = static_cast<PendingFree*>(pending_block);
  pending->tier->pool_.free(pending->block, HostPool::Unpinning::kLater);
  delete pending;
}

bool HostTier::reserve_locked_memory(uint64_t bytes) noexcept {
  uint64_t pinned = pinned_bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > memlock_limit_ || pinned > memlock_limit_ - bytes) {
      memlock_refusals_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!pinned_bytes_.compare_exchange_weak(pinned, pinned + bytes, std::memory_order_relaxed));
  return true;
}

uint64_t HostTier::room_to_lock(void* self) {
  const auto* tier = static_cast<const HostTier*>(self);
  const uint64_t pinned = tier->pinned_bytes_.load(std::memory_order_relaxed);
  return pinned < tier->memlock_limit_ ? tier->memlock_limit_ - pinned : 0;
}

bool HostTier::pin(void* self, std::size_t bytes, void** base) {
  auto* tier = static_cast<HostTier*>(self);
  // Note [The pool's thread and captures]: no pin beside a capture, on any thread; the
  // allocation then finds no room in the pool. The pool's thread and a stream-ordered spill hold
  // the capture gate already (so the answer holds until the pin is made), and taking it again
  // on the same thread is not allowed.
  if (tier->captures_.capturing()) return false;
  if (!tier->reserve_locked_memory(bytes)) return false;
  const bool usable = tier->pin_reserved(bytes, base);
  // Pinned but unusable memory stays counted until the pool unpins it.
  if (!usable && *base == nullptr) tier->pinned_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return usable;
}

bool HostTier::pin_reserved(std::size_t bytes, void** base) noexcept {
  *base = nullptr;
  const auto host_alloc = VRAMSPILL_REAL(cuMemHostAlloc);
  const auto device_pointer = VRAMSPILL_REAL(cuMemHostGetDevicePointer_v2);
  const auto free_host = VRAMSPILL_REAL(cuMemFreeHost);
  if (host_alloc == nullptr || device_pointer == nullptr || free_host == nullptr) return false;
  const driver::ContextScope scope(context_.load(std::memory_order_acquire));
  if (!scope.entered()) return false;
  bool pinned = false;
  {
    const ScopedPreferredNode node(numa_node_.load(std::memory_order_relaxed));
    pinned = host_alloc(base, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) ==
             CUDA_SUCCESS;
  }
  if (!pinned) *base = nullptr;
  if (pinned) {
    CUdeviceptr on_device = 0;
    const CUresult mapped = device_pointer(&on_device, *base, 0);
    const bool same_address = on_device == reinterpret_cast<CUdeviceptr>(*base);
    if (mapped != CUDA_SUCCESS) {
      // The driver's failure, not the device's nature: this pin fails, a later one may work.
      logging::limited(LogLevel::kWarn, RateKey::kDriverFallback,
                       "cuMemHostGetDevicePointer of pinned host memory at {} failed with error "
                       "{}: that memory is given back (off the allocating thread)",
                       *base, static_cast<int>(mapped));
    } else if (!same_address) {
      logging::error("pinned host memory at {} is mapped at another device address ({:#x}): the "
                     "host spill tier needs unified addressing",
                     *base, on_device);
    }
    // The pool unpins it (pinned_memory_ops.h): cuMemFreeHost here could wait for a stream
    // that waits for this thread.
    if (mapped != CUDA_SUCCESS || !same_address) pinned = false;
  }
  return pinned;
}

bool HostTier::when_quiet(void* self, void (*step)(void* pool), void* pool) {
  auto* tier = static_cast<HostTier*>(self);
  const auto captures_held_off = tier->captures_.hold_if_none();
  if (!captures_held_off.owns_lock()) return false;
  step(pool);
  return true;
}

bool HostTier::gone(void* /*self*/, void* base) {
  return driver::memory_freed(reinterpret_cast<uint64_t>(base));
}

// Note [Resetting the device] in hooks/device_reset.h: the addresses of a region that held blocks
// are taken by an inaccessible mapping, so that no pin made later (the driver maps its own) lands
// there; one the system has given to something else since needs none.
void HostTier::forget(void* self, void* base, std::size_t bytes, bool held_blocks) {
  static_cast<HostTier*>(self)->pinned_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  if (!held_blocks) return;
  void* fence = mmap(base, bytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  // A kernel before 4.17 takes the flag for a hint and maps elsewhere when the range is taken.
  if (fence != MAP_FAILED && fence != base) munmap(fence, bytes);
  if (fence != base)
    logging::warn("the host pool's memory at {} freed by a device reset could not be fenced off: "
                  "a block spilled there for another device may meet a new spill",
                  base);
}

bool HostTier::unpin(void* self, void* base, std::size_t bytes) {
  auto* tier = static_cast<HostTier*>(self);
  const auto free_host = VRAMSPILL_REAL(cuMemFreeHost);
  if (free_host == nullptr || free_host(base) != CUDA_SUCCESS) {
    logging::limited(LogLevel::kError, RateKey::kDriverFallback,
                     "cuMemFreeHost of {} bytes of the host pool at {} failed: that memory stays "
                     "pinned, and counted against [spill] host_limit",
                     bytes, base);
    return false;
  }
  tier->pinned_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  return true;
}

}  // namespace vramspill::tiers
