// The prefetch mover's driver calls (tiers/prefetch_ops.h) for one device: cuMemAllocManaged with
// its advice, cuMemPrefetchAsync on two streams of the mover's own in the device's primary
// context (promotions on one, evictions on the other: Note [Two lanes] in
// placement/prefetch_placement.h), and events between those streams and the program's.
//
// Note [Who may reach a managed block]
// Managed memory is reachable from every device with concurrent managed access, peer access
// enabled or not, and where a kernel of another device finds a page decides what the driver
// does with it (cuMemAdvise): a page on the host, its preferred location, is mapped and read over
// the link; a page the mover brought to its device is not where it prefers to be, so the driver
// would migrate it to the device that touched it, out of its own device's budget and into VRAM
// no budget counts. So, as a granule is made accessible to every device that can access its
// device as a peer (Note [Who may reach a granule] in tiers/driver_granule_ops.h), a block is
// advised accessed-by each such device that has concurrent managed access: its pages stay where
// the policy put them, counted by its own device's budget alone, and a peer's kernel reads them
// in place, over the peer link or the host's. A peer advice the driver refuses leaves that peer
// reaching the block by migration, slower and out of the books' sight until the block's next
// move, never wrong; a device that cannot access the block's device as a peer does the same.
//
// Note [A capture begun while a move is queued]
// A move is ordered after its block's last uses by an event recorded on each of their streams,
// and the launch that needs a promotion waits on the mover's event. On a stream being captured
// into a graph neither is harmless: the record would become a node of the graph and the mover's
// stream would join the capture through its wait (the capture then ends unjoined, which
// invalidates it), and a capturing stream that waits on an event recorded outside the capture
// invalidates it (CUDA_ERROR_STREAM_CAPTURE_ISOLATION). The placement moves nothing while a
// capture the shim counted is in progress (Note [No moves during a capture] in
// placement/tiered_placement.h), but a capture may begin on another thread between that test and
// the records. So each record or wait on a program's stream is made holding the capture gate
// shared, which the cuStreamBeginCapture hooks hold exclusively while the driver begins a capture
// (hooks/capture_hooks.cpp): the placement holds it from its test through every call of a move
// (PrefetchDevices::hold_if_may_move()), so these calls never take it again, and each is made
// only once cuStreamIsCapturing has said the stream is not capturing; an error counts as capturing (the legacy stream answers
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while another stream captures, where a record on it would
// invalidate that capture). A capturing stream is left out, said once: the move is not ordered
// after its work, or the launch does not wait for the move. Managed memory is coherent, so that
// costs a fault or a read over the link at worst, never a wrong byte, and the capture ends as it
// would without vramspill. The tracked window's events and waits on a program's stream take the
// same gate and the same look (hooks/submission_events.cpp, tiers/driver_granule_ops.cpp).
#pragma once

#include <cuda.h>

#include <atomic>
#include <unordered_map>
#include <vector>

#include "driver/primary_context.h"
#include "tiers/prefetch_ops.h"

namespace vramspill::tiers {

class DriverPrefetchOps final : public PrefetchOps {
 public:
  // `peers`: the other devices whose kernels may reach this device's blocks in place (Note [Who
  // may reach a managed block]).
  DriverPrefetchOps(int device, std::vector<int> peers) noexcept
      : device_(device), peers_(std::move(peers)) {}
  // Gives back the streams, their events and the primary context they live in.
  ~DriverPrefetchOps() override;

  CUresult allocate(uint64_t bytes, CUdeviceptr* base) noexcept override;
  CUresult release(CUdeviceptr base) noexcept override;
  CUresult prefetch(CUdeviceptr base, uint64_t offset, uint64_t bytes, bool to_device,
                    std::span<const uint64_t> after, bool after_evictions) noexcept override;
  CUresult order_stream_after_prefetches(uint64_t stream) noexcept override;
  bool promotions_done() noexcept override;
  CUresult wait_for_prefetches() noexcept override;
  std::optional<uint64_t> device_free() noexcept override;
  void forget_context() noexcept override;

 private:
  // A stream of the mover's, and the event recorded after its last prefetch.
  struct Lane {
    CUstream stream = nullptr;
    CUevent done = nullptr;
    // Whether `done` was ever recorded; read without the placement's lock by a wait for room.
    std::atomic<bool> used{false};
    // The last prefetch's end could be neither recorded nor waited for: `done` may be older than
    // it, so nothing takes the lane as done until the host has seen its stream idle.
    std::atomic<bool> end_unknown{false};
  };

  // The lanes, made at the first prefetch (or device_free()).
  CUresult make_lanes() noexcept;
  // Makes `waiting` follow what is queued on `other` so far: on the device, through `other`'s
  // end, or on the host where that end is unknown.
  CUresult follow(const Lane& waiting, Lane& other) noexcept;
  // Waits on the host for what is queued on `lane`.
  CUresult wait_for_lane(Lane& lane) noexcept;
  // Makes `lane` wait for what is queued on the program's `stream` now, through an event of the
  // calling thread's context (an event must be of its stream's context; the wait may cross).
  CUresult queue_after(const Lane& lane, uint64_t stream) noexcept;
  // Records, on the eviction lane, the end of the eviction of (part of) the block at `base`, for
  // its next promotion.
  CUresult record_eviction(CUdeviceptr base) noexcept;
  // Says, once, that the driver would not record the end of a queued prefetch.
  static void lost_an_end(CUresult result) noexcept;

  const int device_;
  const std::vector<int> peers_;
  CUcontext primary_ = nullptr;
  driver::PrimaryReference reference_;  // to primary_
  Lane promotions_;
  Lane evictions_;
  // The end of each evicted block's last eviction, whole or in part, by the block's base (a
  // block's promotion must not overtake it).
  std::unordered_map<CUdeviceptr, CUevent> evicted_;
  // An eviction's end went unrecorded: every promotion waits for the whole eviction lane.
  bool whole_lane_for_promotions_ = false;
};

}  // namespace vramspill::tiers
