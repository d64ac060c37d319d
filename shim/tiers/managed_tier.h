// Spill tier `managed`: an allocation that does not fit on the device becomes CUDA managed memory,
// advised to live where [spill] managed_location says (DESIGN.md section 3).
//
// Oversubscribing a device with managed memory needs CONCURRENT_MANAGED_ACCESS (Linux, Pascal or
// later, not under some virtualisation); without it managed memory is migrated wholesale at each
// launch and cannot exceed the device, so supported() says no and placement uses the host pool.
// Every managed spill is charged to the host budget at its full size: wherever the driver keeps
// its pages, they may all come to live in host memory.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "config/config.h"
#include "core/host_budget.h"
#include "tiers/managed_frees.h"

namespace vramspill::tiers {

class ManagedTier {
 public:
  ManagedTier(const SpillConfig& config, core::HostBudget& budget) noexcept
      : config_(config), budget_(budget) {}
  ManagedTier(const ManagedTier&) = delete;
  ManagedTier& operator=(const ManagedTier&) = delete;

  // Whether `device` can oversubscribe with managed memory (asked once per device).
  bool supported(int device) noexcept;

  // Managed memory for `bytes` (cuMemAllocManaged with `flags`), advised per the configuration.
  // CUDA_ERROR_OUT_OF_MEMORY when the host budget has no room (nothing is allocated then).
  CUresult allocate(int device, uint64_t bytes, unsigned int flags, CUdeviceptr* out) noexcept;

  // cuMemFree_v2 (which waits for the device's work, as for any free), then the host budget is
  // given the bytes back.
  CUresult free(CUdeviceptr pointer, uint64_t bytes) noexcept;

  // The same once the work queued on `stream` has run, without waiting for it (Note
  // [Stream-ordered frees of managed spills] in tiers/managed_frees.h).
  CUresult free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, CUstream stream) noexcept {
    return stream_ordered_frees_.free_in_stream_order(pointer, bytes, stream);
  }

  // At exit: no stream-ordered free is in progress once this returns, and none starts.
  void stop_stream_ordered_frees() noexcept { stream_ordered_frees_.stop(); }

 private:
  void advise(int device, CUdeviceptr pointer, uint64_t bytes) noexcept;

  static constexpr std::size_t kDevices = 64;
  enum Support : uint8_t { kUnknown, kSupported, kUnsupported };

  const SpillConfig& config_;
  core::HostBudget& budget_;
  std::array<std::atomic<uint8_t>, kDevices> support_{};
  ManagedFrees stream_ordered_frees_{this, [](void* tier, CUdeviceptr pointer, uint64_t bytes) {
    return static_cast<ManagedTier*>(tier)->free(pointer, bytes);
  }};
};

}  // namespace vramspill::tiers
