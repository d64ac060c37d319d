#include "placement/tracked_work.h"

#include <new>

#include "telemetry/log.h"

namespace vramspill::placement {

// Note [The tracked window]
CUresult TrackedWork::wait_for(std::span<const uint64_t> bases, tiers::GranuleOps& ops) noexcept {
  const core::UseTracker::QueuedUses queued = uses_.take_streams(bases);  // id: its base
  const uint64_t bits = queued.bits;
  core::StreamSlots& slots = uses_.stream_slots();
  CUresult result = CUDA_SUCCESS;
  try {
    const core::StreamSlots::Waiting waiting = slots.waiting_for(bits, queued.through);
    if (!waiting.whole_device) {
      result = ops.wait_for_stream_ends(waiting.ends);
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
    result = ops.synchronize_device();
    if (result == CUDA_SUCCESS) slots.device_drained(waiting);
  } catch (const std::bad_alloc&) {
    result = ops.synchronize_device();
  }
  if (result == CUDA_SUCCESS) {
    device_waits_.fetch_add(1, std::memory_order_relaxed);
  } else {
    uses_.put_back_streams(bits);  // the next move waits for them
  }
  return result;
}

}  // namespace vramspill::placement
