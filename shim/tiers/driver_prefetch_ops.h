// The prefetch mover's driver calls (tiers/prefetch_ops.h) for one device: cuMemAllocManaged with
// its advice, cuMemPrefetchAsync on two streams of the mover's own in the device's primary
// context (promotions on one, evictions on the other: Note [Two lanes] in
// placement/prefetch_placement.h), and events between those streams and the program's.
#pragma once

#include <cuda.h>

#include <unordered_map>

#include "tiers/prefetch_ops.h"

namespace vramspill::tiers {

class DriverPrefetchOps final : public PrefetchOps {
 public:
  explicit DriverPrefetchOps(int device) noexcept : device_(device) {}
  // Gives back the streams, their events and the primary context they live in.
  ~DriverPrefetchOps() override;

  CUresult allocate(uint64_t bytes, CUdeviceptr* base) noexcept override;
  CUresult release(CUdeviceptr base) noexcept override;
  CUresult prefetch(CUdeviceptr base, uint64_t bytes, bool to_device,
                    std::span<const uint64_t> after, bool after_evictions) noexcept override;
  CUresult order_stream_after_prefetches(uint64_t stream) noexcept override;
  bool prefetches_done() noexcept override;
  CUresult wait_for_prefetches() noexcept override;
  std::optional<uint64_t> device_free() noexcept override;

 private:
  // A stream of the mover's, and the event recorded after its last prefetch.
  struct Lane {
    CUstream stream = nullptr;
    CUevent done = nullptr;
    bool used = false;  // whether `done` was ever recorded
  };

  // The lanes, made at the first prefetch (or device_free()).
  CUresult make_lanes() noexcept;
  // Makes `lane` wait for what is queued on the program's `stream` now, through an event of the
  // calling thread's context (an event must be of its stream's context; the wait may cross).
  CUresult queue_after(const Lane& lane, uint64_t stream) noexcept;
  // Records, on the eviction lane, the end of `base`'s eviction, for its next promotion.
  CUresult record_eviction(CUdeviceptr base) noexcept;

  const int device_;
  CUcontext primary_ = nullptr;
  Lane promotions_;
  Lane evictions_;
  // The end of each evicted block's last eviction (a block's promotion must not overtake it).
  std::unordered_map<CUdeviceptr, CUevent> evicted_;
};

}  // namespace vramspill::tiers
