// What the prefetch mover asks of the driver for one device ([tiered] mover = "prefetch"; Note
// [The prefetch mover] in placement/prefetch_placement.h): managed blocks, prefetches on a stream
// of the mover's own, and the orderings between that stream and the program's. The real driver's
// answers are tiers/driver_prefetch_ops.h; unit tests use a fake.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <span>

namespace vramspill::tiers {

class PrefetchOps {
 public:
  virtual ~PrefetchOps() = default;
  PrefetchOps(const PrefetchOps&) = delete;
  PrefetchOps& operator=(const PrefetchOps&) = delete;

  // A managed allocation of `bytes` whose pages prefer the host and are accessed by the device,
  // so that a kernel reads those not brought in over the link instead of faulting them over.
  virtual CUresult allocate(uint64_t bytes, CUdeviceptr* base) noexcept = 0;
  // Frees a block; the caller has waited for the prefetches queued on it (wait_for_prefetches).
  virtual CUresult release(CUdeviceptr base) noexcept = 0;
  // Queues a prefetch of [base + offset, base + offset + bytes), part or all of the block at
  // `base`, to the device or to the host, after the work queued so far on each of `after`
  // (program streams, as the use tracker names them: the streams of the block's last uses). A
  // stream whose wait cannot be queued (one destroyed since) is not waited for: managed memory
  // stays coherent, the move only overlaps.
  // Promotions and evictions go on two streams of the mover's own (Note [Two lanes] in
  // placement/prefetch_placement.h), so that one direction need not wait for the other: an
  // eviction follows every promotion queued before it, a promotion follows the last eviction of
  // any part of its block, and all queued evictions only when `after_evictions` (the card needs
  // their room).
  // The caller holds the capture gate, so that no capture begins among the records this makes
  // on program streams (Note [A capture begun while a move is queued] in
  // tiers/driver_prefetch_ops.h).
  virtual CUresult prefetch(CUdeviceptr base, uint64_t offset, uint64_t bytes, bool to_device,
                            std::span<const uint64_t> after, bool after_evictions) noexcept = 0;
  // Makes `stream` wait, on the device, for every promotion queued so far; the caller holds the
  // capture gate, as for prefetch().
  virtual CUresult order_stream_after_prefetches(uint64_t stream) noexcept = 0;
  // Whether every promotion queued so far has run (without waiting).
  virtual bool promotions_done() noexcept = 0;
  // Waits on the host for the prefetches queued so far, either way (before a block is freed).
  virtual CUresult wait_for_prefetches() noexcept = 0;
  // The device's free memory as the driver counts it, or nullopt when it does not answer.
  virtual std::optional<uint64_t> device_free() noexcept = 0;
  // The device's primary context was reset (Note [Resetting the device] in
  // hooks/device_reset.h): the lanes and their events went with it, so they are forgotten, not
  // destroyed; the next prefetch makes new ones.
  virtual void forget_context() noexcept = 0;

 protected:
  PrefetchOps() = default;
};

}  // namespace vramspill::tiers
