// The VMM calls the granule arena (tiers/granule_arena.h) makes, behind a seam: the shim passes
// the real driver's, unit tests a fake that counts calls and fails on demand. One GranuleOps
// serves one device: its granules are that device's memory, or host memory on the device's
// NUMA node.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>

#include "util/stream_end.h"

namespace vramspill::tiers {

// The size of one physical granule: the driver's allocation granularity for device memory on
// every current GPU, and the size of PyTorch's small segments.
inline constexpr uint64_t kGranuleBytes = uint64_t{2} << 20;

// Where a granule's bytes are.
enum class GranuleKind : uint8_t { kDevice, kHost };

// A physical allocation (a CUmemGenericAllocationHandle) of one granule or of a chunk of several
// (Note [Chunks] in tiers/granule_chunks.h).
using GranuleHandle = uint64_t;

// Note [Two copy lanes]
// A GPU copies host-to-device and device-to-host on separate engines, so a batch's evictions
// need not queue behind its promotions. The arena's copies run on two lanes, one per direction
// (CopyLane), each in order. They come in epochs, each begun by begin_copies(): copies of one
// epoch on different lanes may run at once, and every copy follows all the copies of earlier
// epochs. So one epoch's two lanes must touch disjoint memory, which a batch of moves does:
// evictions read the evicted blocks' device granules and write new host granules, promotions
// read the promoted blocks' host granules and write new device granules, and a granule an earlier
// batch's copy may still read or write (a pooled one, Note [Moves copied on the stream] in
// tiers/granule_arena.h) is ordered by the epochs. Waiting for, recording after, or queuing after
// "the copies" means both lanes', and begins an epoch too. The mover queues a batch's evictions first, so that the
// to-host lane's start does not wait for the batch's promotions (in the driver the lane forks
// from the arena's stream at its first copy of an epoch: tiers/driver_granule_ops.h).
enum class CopyLane : uint8_t { kToDevice, kToHost };

// A handle as map() takes it: mapped whole, over `granules` granules from its start.
struct Mapping {
  GranuleHandle handle = 0;
  uint64_t granules = 1;
};

class GranuleOps {
 public:
  // cuMemAddressReserve: `bytes` (a multiple of kGranuleBytes) of address space, aligned to a
  // granule, at *base.
  virtual CUresult reserve(uint64_t bytes, CUdeviceptr* base) noexcept = 0;
  // cuMemAddressFree of exactly what reserve() returned; nothing may be mapped in it.
  virtual CUresult unreserve(CUdeviceptr base, uint64_t bytes) noexcept = 0;
  // cuMemCreate of `granules` granules of `kind`: one handle.
  virtual CUresult create(GranuleKind kind, uint64_t granules, GranuleHandle* handle) noexcept = 0;
  // cuMemRelease of a handle that is mapped nowhere.
  virtual CUresult release(GranuleHandle handle) noexcept = 0;
  // One cuMemMap per handle of `mappings`, each whole (the driver maps a handle from offset 0
  // only), one after the other from `address` (granule-aligned, inside one reservation, nothing
  // mapped there yet), then one cuMemSetAccess over the whole run giving the device read and
  // write: a mapped granule is always reachable, from kernels as from copies. All or nothing: on
  // failure nothing of the run stays mapped.
  virtual CUresult map(CUdeviceptr address, std::span<const Mapping> mappings) noexcept = 0;
  // One cuMemUnmap of the `granules` granules from `address`, covering whole mappings only (the
  // driver takes a range over several). The caller has made sure no work can touch them.
  virtual CUresult unmap(CUdeviceptr address, uint64_t granules) noexcept = 0;
  // The VMM calls made so far (cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease,
  // cuMemMap, cuMemSetAccess, cuMemUnmap), failed ones too: what a move costs the host is
  // mostly these (Note [Granule homes] in tiers/granule_homes.h).
  virtual uint64_t vmm_calls() const noexcept = 0;

  // Waits for all the work queued on the device (cuCtxSynchronize), and on each peer in use that
  // may reach its granules: nothing queued before a remap may run after it.
  virtual CUresult synchronize_device() noexcept = 0;
  // Waits, on each stream of `ends`, for its event, or without one for all the work queued on
  // it so far: the tracked window's narrower wait (Note [The tracked window] in
  // placement/tracked_work.h).
  virtual CUresult wait_for_stream_ends(
      std::span<const StreamEnd> ends) noexcept = 0;
  // Begins an epoch of copies (Note [Two copy lanes]): the copies queued after it follow all
  // those queued before it, on both lanes.
  virtual CUresult begin_copies() noexcept = 0;
  // Queues a copy of `bytes` from `source` to `destination` (mapped, device-accessible ranges)
  // on the arena's own `lane` (Note [Two copy lanes]).
  virtual CUresult copy(CUdeviceptr destination, CUdeviceptr source, uint64_t bytes,
                        CopyLane lane) noexcept = 0;
  // Waits for the copies copy() queued; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, without waiting,
  // while a capture is in progress, which a wait on the host would break (Note [No moves during
  // a capture] in placement/tiered_placement.h).
  virtual CUresult wait_for_copies() noexcept = 0;
  // Makes the copies queued after it wait, on the device, for each of `events` (cuStreamWaitEvent
  // on the arena's stream): a staged promotion's copy follows the blocks' last uses while the
  // host goes on (Note [Staged promotions] in tiers/granule_arena.h).
  virtual CUresult queue_copies_after(std::span<const uint64_t> events) noexcept = 0;
  // Records an event after the copies queued so far (cuEventRecord on the arena's stream), at
  // *event: what submissions wait for after a move copied on the stream (Note [Moves copied on
  // the stream] in tiers/granule_arena.h).
  virtual CUresult record_copies(uint64_t* event) noexcept = 0;
  // Records an event after the copies queued so far on `lane` alone, at *event, without ending
  // the epoch (Note [Evictions ahead of promotions] in tiers/granule_mover.h).
  virtual CUresult mark_copies(CopyLane lane, uint64_t* event) noexcept = 0;
  // Makes the copies queued next on `lane` wait, on the device, for an event of mark_copies()
  // (cuStreamWaitEvent on the lane's stream), without ending the epoch.
  virtual CUresult follow_mark(CopyLane lane, uint64_t event) noexcept = 0;
  // Whether the copies before `event` are done (cuEventQuery); false when the driver cannot say,
  // and while a capture is in progress, which the query would break.
  virtual bool copies_done(uint64_t event) noexcept = 0;
  // Gives an event of record_copies() or mark_copies() back (cuEventDestroy).
  virtual void drop_event(uint64_t event) noexcept = 0;
  // Makes the work queued next on `stream` (a stream of the calling thread, as a submission names
  // it) wait for the copies before `event`: on the device (cuStreamWaitEvent), or on the host
  // (cuEventSynchronize) where that fails and `capturing` (a capture in progress) does not
  // forbid it; a stream being captured queues nothing now and waits for nothing (Note [Copies
  // and captures] in tiers/driver_granule_ops.cpp).
  virtual CUresult order_stream_after(uint64_t stream, uint64_t event, bool capturing) noexcept = 0;
  // The device's primary context was reset (Note [Resetting the device] in
  // hooks/device_reset.h): the lanes' streams and every event record_copies() and mark_copies()
  // gave went with it, so they are forgotten, not destroyed; the next copy makes new ones.
  virtual void forget_context() noexcept = 0;

 protected:
  GranuleOps() = default;
  ~GranuleOps() = default;
  GranuleOps(const GranuleOps&) = default;
  GranuleOps& operator=(const GranuleOps&) = default;
};

}  // namespace vramspill::tiers
