#include "placement/tracked_work.h"

#include <bit>
#include <new>

#include "telemetry/log.h"

namespace vramspill::placement {

// Note [The tracked window]
CUresult TrackedWork::wait_for(std::span<const uint64_t> bases, tiers::GranuleOps& ops) noexcept {
  // With arenas on two devices, "the whole device" would not cover what the bits say (the
  // other device's streams, its retired slots, its contexts' legacy streams): the safe wait,
  // and the bits stay for no one to clear.
  if (std::popcount(devices_with_arenas_.load(std::memory_order_acquire)) > 1)
    return ops.synchronize_device();
  const core::UseTracker::QueuedUses queued = uses_.take_streams(bases);  // id: its base
  core::StreamSlots& slots = uses_.stream_slots();
  try {
    const core::StreamSlots::Waiting waiting = slots.waiting_for(queued.bits, queued.through);
    if (!waiting.whole_device) {
      const CUresult result = ops.wait_for_stream_ends(waiting.ends);
      if (result == CUDA_SUCCESS) {
        stream_waits_.fetch_add(1, std::memory_order_relaxed);
        return CUDA_SUCCESS;
      }
      static constinit std::atomic<bool> said{false};
      if (!said.exchange(true))
        logging::warn(
            "tiered window: waiting for the streams that used the moving blocks failed ({}); "
            "this move and any like it wait for the whole device",
            static_cast<int>(result));
    }
    const CUresult result = ops.synchronize_device();
    if (result == CUDA_SUCCESS) {
      slots.device_drained(waiting);
    } else {
      uses_.put_back_streams(queued);  // the next move waits for them
    }
    return result;
  } catch (const std::bad_alloc&) {
    uses_.put_back_streams(queued);
    return ops.synchronize_device();
  }
}

}  // namespace vramspill::placement
