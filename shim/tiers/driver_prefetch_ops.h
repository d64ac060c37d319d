// The prefetch mover's driver calls (tiers/prefetch_ops.h) for one device: cuMemAllocManaged with
// its advice, cuMemPrefetchAsync on a stream of the mover's own in the device's primary context,
// and events between that stream and the program's.
#pragma once

#include <cuda.h>


#include "tiers/prefetch_ops.h"

namespace vramspill::tiers {

class DriverPrefetchOps final : public PrefetchOps {
 public:
  explicit DriverPrefetchOps(int device) noexcept : device_(device) {}
  // Gives back the stream, its event and the primary context they live in.
  ~DriverPrefetchOps() override;

  CUresult allocate(uint64_t bytes, CUdeviceptr* base) noexcept override;
  CUresult release(CUdeviceptr base) noexcept override;
  CUresult prefetch(CUdeviceptr base, uint64_t bytes, bool to_device,
                    std::span<const uint64_t> after) noexcept override;
  CUresult order_stream_after_prefetches(uint64_t stream) noexcept override;
  bool prefetches_done() noexcept override;
  CUresult wait_for_prefetches() noexcept override;
  std::optional<uint64_t> device_free() noexcept override;

 private:
  // The stream and the event recorded after each prefetch, made at the first prefetch.
  CUresult make_stream() noexcept;
  // Makes the mover's stream wait for what is queued on `stream` now, through an event of the
  // calling thread's context (an event must be of its stream's context; the wait may cross).
  CUresult queue_after(uint64_t stream) noexcept;

  const int device_;
  CUcontext primary_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent prefetched_ = nullptr;  // recorded after the last prefetch
};

}  // namespace vramspill::tiers
