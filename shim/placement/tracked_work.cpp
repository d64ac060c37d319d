#include "placement/tracked_work.h"

#include <algorithm>
#include <bit>
#include <new>
#include <vector>

#include "telemetry/log.h"

namespace vramspill::placement {

// Note [The tracked window]
CUresult TrackedWork::wait_for(std::span<const uint64_t> bases, tiers::GranuleOps& ops) noexcept {
  return settle(bases, ops, [&](const core::StreamSlots::Waiting& waiting) {
    return ops.wait_for_stream_ends(waiting.ends);
  });
}

// Note [Staged promotions] in tiers/granule_arena.h: the streams whose blocks' last uses an event
// follows are waited for by the copies, on the device; the others by the host, as wait_for does.
CUresult TrackedWork::order_after(std::span<const uint64_t> bases, tiers::GranuleOps& ops,
                                  uint64_t& since) noexcept {
  // The window is closed: no submission is between its mark and its driver call.
  since = uses_.stream_slots().last_mark();
  return settle(bases, ops, [&](const core::StreamSlots::Waiting& waiting) {
    std::vector<uint64_t> events;
    std::vector<StreamEnd> whole_streams;
    for (const StreamEnd& end : waiting.ends) {
      if (end.event != 0) {
        events.push_back(end.event);
      } else {
        whole_streams.push_back(end);
      }
    }
    const CUresult result = ops.queue_copies_after(events);
    return result == CUDA_SUCCESS && !whole_streams.empty()
               ? ops.wait_for_stream_ends(whole_streams)
               : result;
  });
}

bool TrackedWork::queued_since(uint64_t base, uint64_t since) noexcept {
  return uses_.marked_since(base, since);  // id: its base
}

bool TrackedWork::names_every_use(std::span<const uint64_t> bases) noexcept {
  return std::ranges::all_of(bases, [&](uint64_t base) {
    return uses_.last_use(base).has_value();  // id: its base
  });
}

template <typename WaitForEnds>
CUresult TrackedWork::settle(std::span<const uint64_t> bases, tiers::GranuleOps& ops,
                             WaitForEnds&& wait_for_ends) noexcept {
  // With arenas on two devices, "the whole device" would not cover what the bits say (the
  // other device's streams, its retired slots, its contexts' legacy streams): the safe wait,
  // and the bits stay for no one to clear.
  if (std::popcount(devices_with_arenas_.load(std::memory_order_acquire)) > 1) {
    device_waits_.fetch_add(1, std::memory_order_relaxed);
    return ops.synchronize_device();
  }
  const core::UseTracker::QueuedUses queued = uses_.take_streams(bases);  // id: its base
  core::StreamSlots& slots = uses_.stream_slots();
  try {
    const core::StreamSlots::Waiting waiting = slots.waiting_for(queued.bits, queued.through);
    if (!waiting.whole_device) {
      const CUresult result = wait_for_ends(waiting);
      if (result == CUDA_SUCCESS) {
        stream_waits_.fetch_add(1, std::memory_order_relaxed);
        return CUDA_SUCCESS;
      }
      // A capture began since the mover looked (Note [No moves during a capture]): the move
      // stops, and the next one waits for these streams.
      if (result == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
        uses_.put_back_streams(queued);
        return result;
      }
      static constinit std::atomic<bool> said{false};
      if (!said.exchange(true))
        logging::warn(
            "tiered window: waiting for the streams that used the moving blocks failed ({}); "
            "this move and any like it wait for the whole device",
            static_cast<int>(result));
    }
    device_waits_.fetch_add(1, std::memory_order_relaxed);
    const CUresult result = ops.synchronize_device();
    if (result == CUDA_SUCCESS) {
      slots.device_drained(waiting);
    } else {
      uses_.put_back_streams(queued);  // the next move waits for them
    }
    return result;
  } catch (const std::bad_alloc&) {
    uses_.put_back_streams(queued);
    device_waits_.fetch_add(1, std::memory_order_relaxed);
    return ops.synchronize_device();
  }
}

}  // namespace vramspill::placement
