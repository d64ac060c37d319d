// Spill tier `managed`: an allocation that does not fit on the device becomes CUDA managed memory,
// advised to live where [spill] managed_location says (shim/README.md, "Placement modes").
//
// Oversubscribing a device with managed memory needs CONCURRENT_MANAGED_ACCESS (Linux, Pascal or
// later, not under some virtualisation); without it managed memory is migrated wholesale at each
// launch and cannot exceed the device, so supported() says no and placement uses the host pool.
// Every managed spill is charged to the host budget at its full size: wherever the driver keeps
// its pages, they may all come to live in host memory.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <optional>

#include "config/config.h"
#include "core/host_budget.h"
#include "tiers/stream_ordered_frees.h"
#include "tiers/spill_tier.h"

namespace vramspill::tiers {

class ManagedTier final : public SpillTier {
 public:
  // `captures`: held through each stream-ordered free (Note [Stream-ordered frees on the shim's
  // thread] in tiers/stream_ordered_frees.h).
  ManagedTier(const SpillConfig& config, core::HostBudget& budget,
              core::CaptureGate& captures) noexcept
      : SpillTier("managed memory", core::Route::kSpillManaged),
        config_(config),
        budget_(budget),
        stream_ordered_frees_(
            this,
            [](void* tier, CUdeviceptr pointer, uint64_t bytes, int /*device*/) {
              return static_cast<ManagedTier*>(tier)->free_now(pointer, bytes);
            },
            &captures, StreamOrderedFrees::Gate::kHeldThroughFree) {}

  // At exit: StreamOrderedFrees::stop.
  void stop_stream_ordered_frees(std::chrono::steady_clock::time_point give_up_at) noexcept {
    stream_ordered_frees_.stop(give_up_at);
  }
  // Before a device reset: StreamOrderedFrees::drain.
  bool drain_stream_ordered_frees(std::chrono::milliseconds patience) noexcept {
    return stream_ordered_frees_.drain(patience);
  }

 private:
  // Whether the device can oversubscribe with managed memory (CONCURRENT_MANAGED_ACCESS).
  std::optional<bool> do_query_support(int device) noexcept override;
  // cuMemAllocManaged with the request's flags, advised per the configuration; refused with
  // kHostLimit when the host budget has no room (nothing is allocated then).
  SpillOutcome do_allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept override;
  // cuMemFree_v2 (which waits for the device's work, as for any free), then the host budget is
  // given the bytes back.
  CUresult do_free(CUdeviceptr pointer, uint64_t bytes, int device) noexcept override;
  // Gone if the driver freed it: the shim made it in the context current at the spill, which a
  // reset took with it only if it was the device's primary one.
  bool do_forget_if_lost(CUdeviceptr pointer, uint64_t bytes) noexcept override;
  // The same once the work queued on `stream` has run, without waiting for it (Note
  // [Stream-ordered frees on the shim's thread] in tiers/stream_ordered_frees.h).
  CUresult do_free_in_stream_order(CUdeviceptr pointer, uint64_t bytes, int device,
                                   CUstream stream) noexcept override {
    return stream_ordered_frees_.free_in_stream_order(pointer, bytes, device, stream);
  }

  CUresult free_now(CUdeviceptr pointer, uint64_t bytes) noexcept;
  void advise(int device, CUdeviceptr pointer, uint64_t bytes) noexcept;

  const SpillConfig& config_;
  core::HostBudget& budget_;
  StreamOrderedFrees stream_ordered_frees_;
};

}  // namespace vramspill::tiers
