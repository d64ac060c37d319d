// The one interface every spill tier implements: where an allocation that does not fit on the
// device can live instead (managed memory, the pinned host pool).
//
// Note [Spill tiers]
// Placement (placement/spill_placement.h) chooses tiers and records what they did; a tier only
// allocates and frees. The public methods are not virtual: they check what every tier must
// honour once, here, and the private do_* methods do the tier's own work (RMM's memory
// resources have this shape). A tier's answer to "does this device support you" is cached per
// device once the driver has given it; a query the driver refused is asked again next time, since
// caching one failure would disable the tier for the whole process.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/route.h"

namespace vramspill::tiers {

// What a spill asks of a tier.
struct SpillAllocation {
  int device = 0;  // the device whose budget had no room
  uint64_t bytes = 0;
  unsigned int managed_flags = CU_MEM_ATTACH_GLOBAL;  // cuMemAllocManaged's own flags
};

// Why a tier did not take a spill, so that the log can say what to change.
enum class SpillRefusal : uint8_t {
  kNone,               // it did
  kHostLimit,          // [spill] host_limit has no room for it
  kLockedMemoryLimit,  // pinning would pass RLIMIT_MEMLOCK
  kDriver,             // the driver refused (the result says how)
};

struct SpillOutcome {
  CUresult result = CUDA_SUCCESS;
  SpillRefusal refusal = SpillRefusal::kNone;
};

class SpillTier {
 public:
  SpillTier(const SpillTier&) = delete;
  SpillTier& operator=(const SpillTier&) = delete;

  // For log lines: "managed memory", "the pinned host pool".
  const char* name() const noexcept { return name_; }
  // The ledger route of the allocations it holds; placement finds a spill's tier by it.
  core::Route route() const noexcept { return route_; }

  // Whether `device` can use this tier (Note [Spill tiers]: cached once known).
  bool supported(int device) noexcept;

  // Memory for `request`, at *out. On failure *out is untouched and the refusal says why.
  SpillOutcome allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept;

  // Frees a spill this tier made, at once, after the work of its device.
  CUresult free(CUdeviceptr pointer, uint64_t bytes, int device) noexcept {
    return do_free(pointer, bytes, device);
  }
  // The same once the work queued on `stream` before the call has run, without waiting for it.
  CUresult free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, int device,
                                CUstream stream) noexcept {
    return do_free_in_stream_order(pointer, bytes, device, stream);
  }
  // After a reset of the spill's device (Note [Resetting the device] in hooks/device_reset.h):
  // whether the spill went with the reset context; if so, what this tier counted of it is given
  // back, and the driver is asked to free nothing.
  bool forget_if_lost(CUdeviceptr pointer, uint64_t bytes) noexcept {
    return do_forget_if_lost(pointer, bytes);
  }

 protected:
  SpillTier(const char* name, core::Route route) noexcept : name_(name), route_(route) {}
  ~SpillTier() = default;  // tiers are never destroyed through this interface

 private:
  // The driver's answer for `device`; nullopt when it refused to answer.
  virtual std::optional<bool> do_query_support(int device) noexcept = 0;
  virtual SpillOutcome do_allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept = 0;
  virtual CUresult do_free(CUdeviceptr pointer, uint64_t bytes, int device) noexcept = 0;
  virtual CUresult do_free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, int device,
                                           CUstream stream) noexcept = 0;
  virtual bool do_forget_if_lost(CUdeviceptr pointer, uint64_t bytes) noexcept = 0;

  static constexpr std::size_t kDevices = 64;
  enum Support : uint8_t { kUnknown, kSupported, kUnsupported };

  const char* name_;
  core::Route route_;
  std::array<std::atomic<uint8_t>, kDevices> support_{};
};

}  // namespace vramspill::tiers
