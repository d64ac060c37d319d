// Stream-ordered requests as tiered blocks ([tiered] stream_ordered = "arena", the default in
// tiered mode): which kept block serves a request, when kept blocks go back to their mover (the
// arena, or the prefetch mover), and which frees are kept (tiers/stream_ordered_reuse.h holds the
// kept blocks). The driver is reached through StreamOrderSeam (hooks/driver_stream_order.h on the
// real driver, a fake in tests/shim/placement/stream_ordered_blocks_test.cpp).
//
// Note [Stream-ordered requests in the arena]
// With every tensor stream-ordered (PyTorch's cudaMallocAsync backend), the driver's pools hold
// the whole budget and tiered mode has nothing to evict: requests past the budget spilled to
// managed memory every step (Note [Stream-ordered requests in tiered mode] in
// placement/admission_flow.h). So in tiered mode a request of at least [tiered] min_size from the
// device's default pool, or from a plain pool of the program's on the device (PoolBooks), is
// a tiered block instead (TieredBlocks), with either mover: a block of the device's arena, or
// with [tiered] mover = "prefetch" one managed allocation (Note [The prefetch mover] in
// placement/prefetch_placement.h; the arena's where that mover cannot serve the device). It can
// be evicted and promoted like any other, and the budget counts its granules (or the prefetch
// books' whole 2 MiB pages: the same unit). A new block is usable at once, before its stream gets
// to the request, which is all stream order asks. cuMemFreeAsync keeps the block for reuse in
// stream order (Note [Reuse in stream order]) rather than freeing it when its stream gets there:
// a new arena block maps its granules (about 28 us of host time a granule on the H200, Note [Host
// call costs] in tools/simcuda), a new managed block costs cuMemAllocManaged and its advice, and
// a freed one a cuMemFree that waits for the device, where the driver's pool hands out memory it
// holds; a job that allocates the same sizes every step would pay that for every tensor of every
// step. A kept block serves any request of as many granules, so a managed one spans them whole.
// A request is served, in order: by a kept block of its size (its own stream's, or one whose
// stream has reached its free), unless that block was reached and is on the host in part (its
// first launch would promote it, copying bytes nothing reads: it goes back to its mover); by a
// new block, after kept blocks that have been reached are given back where the budget has no
// room for it; and if the budgets refuse the new block, after every reached kept block is given
// back. Otherwise it goes to its pool as before (and may spill).
// So within the budget a job that frees and allocates the same sizes every step maps nothing
// after its first step. Past the budget some blocks must leave the device every step: kept ones
// go back and are made again, as cuMemFree and cuMemAlloc would, and neither mover moves a kept
// block's dead bytes (Note [Moves of dead contents] in tiers/granule_arena.h, Note [Dead blocks
// and the prefetch mover]). Modeled on simcuda (tests/shim/tiered/all_stream_ordered_workload.cpp,
// nothing but cuMemAllocAsync): with the remap mover, within the budget 0.02x the step time of
// the same job with cuMemAlloc, frees included, and at 1.5x the budget 0.84x in both windows
// (kept blocks leave the device without a copy); with the prefetch mover at 1.5x, 0.36x (4.1
// against 11.5 ms), or with [tiered] admission = "always" 0.48 ms, at most that job's (0.48 to
// 2.01 ms in eight runs: it varies from run to run). Before, every request past the budget spilled
// to managed memory every step. What is given back depends on which frees are reached, so a job
// that never waits for its streams sees these figures vary from run to run.
// Left to the pools as before: pools with an exportable handle type, a size cap or a special
// usage (another process or the hardware would need the pool's memory), managed pools (the
// program may touch their memory from the host), host-located pools,
// requests while the stream is being captured (the graph would need a graph memory node),
// requests below min_size, devices that neither mover can tier, and [tiered] stream_ordered =
// "pool". With the prefetch mover a request while another stream is being captured makes no
// managed memory, which a global-mode capture forbids (and which the pool's spill would make):
// it reuses a kept block, or becomes a block of the remap mover, whose VMM calls a capture
// allows (Note [Managed memory and captures begun meanwhile] in placement/prefetch_placement.h).
// What a tiered block cannot imitate: it belongs to no pool, so CU_POINTER_ATTRIBUTE_MEMPOOL_
// HANDLE gives none; the pool's attributes (USED_MEM_CURRENT, RESERVED_MEM_CURRENT) do not count
// it; the release threshold does not give kept blocks back (their mover does, under pressure, and
// cuMemPoolTrimTo of any plain pool of the device, whatever size it keeps);
// cuMemPoolExportPointer cannot export it; a block freed on one stream serves another only once
// its stream reached the free, never by the event dependencies the driver may follow
// (CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES). A kept block stays live for the eviction
// policy: when room is needed before its free is reached, the policy may evict it, its contents
// copied for nothing, before the next request gives it up.
//
// Note [Kept blocks give room to every request]
// The remap mover keeps freed stream-ordered blocks up to twice the device budget, and evicts
// those whose frees were reached without a copy (Note [Moves of dead contents] in
// tiers/granule_arena.h), but their host granules still count against the host limit. Were they
// given back only to stream-ordered requests, a job that frees its step's scratch blocks and then
// allocates with cuMemAlloc (or whose driver allocations need device room) would push them to the
// host and fill the host limit with memory it freed, until a spill or an eviction was refused.
// So every request that needs room gives back reached kept blocks first, as a new stream-ordered
// block does: the room the device budget lacks, then all of them should the budgets refuse it.
// (The prefetch mover frees them itself when it needs room: the Note below.)
//
// Note [Dead blocks and the prefetch mover]
// Once its free is reached, a kept block's bytes are dead, yet to the policy it is the coldest
// block there is. The arena evicts it without a copy (Note [Moves of dead contents]); unified
// memory has no move without the bytes, so the prefetch mover would prefetch them to the host,
// and the request that takes the block next would find it there and give it back anyway. So when
// the prefetch mover needs room (a launch's promotion, a new block, another allocation), it first
// frees the dead blocks it has on the device (DeadBlocks in placement/prefetch_placement.h, which
// this implements): each is taken from the kept ones and from use tracking, then freed, and only
// then does the policy name victims.
// A free waits on the host for the mover's prefetches and, as cuMemFree does, for the device:
// dearer than a prefetch out when much work is queued, but it moves nothing, and a step of
// all_stream_ordered_workload at 1.5x the budget with admission = "always" went from 5.36 to
// 0.48 ms (modeled), 416 of its 772 MiB of evictions having been dead bytes; with the default
// admission, which evicted nothing, from 4.74 to 4.14 ms, the freed room taken by new blocks
// that had stayed on the host. Reuse itself pays with this mover too: without it (every free
// done), the same step took 20.5 ms with the default admission, 0.48 with "always" (simcuda
// charges managed allocations and frees no host time, which favours going without).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "config/config.h"
#include "core/allocation_table.h"
#include "core/ledger.h"
#include "placement/pool_books.h"
#include "placement/tiered_blocks.h"
#include "placement/tiered_placement.h"
#include "tiers/stream_ordered_reuse.h"

namespace vramspill::placement {

// What reuse in stream order needs of the driver.
class StreamOrderSeam {
 public:
  // Queues `run(data)` on `stream`, after the work queued there so far (cuLaunchHostFunc); false
  // when it could not be queued (or the stream is being captured, where it would join the
  // graph), and then `run` is never called.
  virtual bool queue_host_function(CUstream stream, CUhostFn run, void* data) noexcept = 0;
  // Whether everything queued on `stream` so far has run (cuStreamQuery); false when the driver
  // does not say, or may not be asked (a capture in progress).
  virtual bool idle(CUstream stream) noexcept = 0;
  // Waits on the host until everything queued on `stream` so far has run (cuStreamSynchronize);
  // false when the driver could not, or may not be asked (a capture in progress).
  virtual bool wait_for(CUstream stream) noexcept = 0;
  // The calling thread's current context, as a number (cuCtxGetCurrent); 0 when none. The legacy
  // and per-thread default streams are one of each context (Note [Which stream a key names]).
  virtual uint64_t current_context() noexcept = 0;

 protected:
  StreamOrderSeam() = default;
  ~StreamOrderSeam() = default;
  StreamOrderSeam(const StreamOrderSeam&) = default;
  StreamOrderSeam& operator=(const StreamOrderSeam&) = default;
};

class StreamOrderedBlocks final : public DeadBlocks {
 public:
  // Each reference must outlive this (all are the shim state's).
  StreamOrderedBlocks(const Config& config, const core::Ledger& ledger, TieredBudgets& budgets,
                      TieredBlocks& blocks, PoolBooks& pools, tiers::StreamOrderedReuse& reuse,
                      StreamOrderSeam& seam) noexcept
      : config_(config),
        ledger_(ledger),
        budgets_(budgets),
        blocks_(blocks),
        pools_(pools),
        reuse_(reuse),
        seam_(seam) {}
  StreamOrderedBlocks(const StreamOrderedBlocks&) = delete;
  StreamOrderedBlocks& operator=(const StreamOrderedBlocks&) = delete;

  // The request for `bytes` on `stream` from `pool` (the device's current pool for
  // cuMemAllocAsync) as a tiered block (Note [Stream-ordered requests in the arena]): the result
  // with *out set, or nullopt when it goes to its pool as before. The caller has made the device
  // known and found the stream not being captured.
  std::optional<CUresult> allocate(int device, CUmemoryPool pool, uint64_t bytes, CUstream stream,
                                   CUdeviceptr* out) noexcept;

  // cuMemFreeAsync of the tiered block `block` on `stream` (not capturing), which the ledger has
  // forgotten: whether it is kept for reuse (Note [Reuse in stream order]); false when the caller
  // frees it as any tiered block. With the prefetch mover, a block kept but whose stream cannot
  // say when it gets there (its host function could not be queued) stays kept: the caller's
  // cuMemFree would break a capture in progress; its stream is waited for instead, as the free
  // in stream order would, and the block is then reached, for its mover to free when no capture
  // is in progress (Note [Dead blocks and the prefetch mover]). Should a capture be in progress
  // (the wait would break it), or the wait fail, it waits for its stream to be found idle, or
  // to end (stream_ended()).
  bool keep(const core::Allocation& block, CUstream stream) noexcept;

  // A tiered block of `bytes` for a request that is not stream-ordered (cuMemAlloc and the like:
  // TieredBlocks::allocate()): with the remap mover, the kept blocks whose frees were reached
  // give their room first, as for a new stream-ordered block (Note [Kept blocks give room to
  // every request]). nullopt when it is no tiered block.
  std::optional<CUresult> allocate_plain(int device, uint64_t bytes, CUdeviceptr* out) noexcept;

  // Room for `bytes` on `device`, which an allocation that is no tiered block needs (the admission
  // flow's, through TieredSeam::make_device_room()): with the remap mover, the kept blocks whose
  // frees were reached go back until the device budget has it, or none is left.
  void make_room(int device, uint64_t bytes) noexcept;

  // cuMemPoolTrimTo of `pool` succeeded: if it is a plain pool of a device (PoolBooks::plain()),
  // that device's kept blocks whose frees were reached go back to its arena, as a trim gives back
  // a pool's unused memory (the kept blocks stand for the memory of all its plain pools).
  void pool_trimmed(CUmemoryPool pool) noexcept;

  // The live block at `base` was freed some other way (cuMemFree): it is no longer one of these.
  void forgotten(CUdeviceptr base) noexcept { reuse_.forgotten(base); }

  // The program is destroying `stream`, or a context (all its streams): blocks freed on them are
  // taken only once their frees are reached, since a handle may come back for a new stream.
  // Called before the driver destroys it: a question about the stream another thread is asking
  // ends first and none follows, and one last host function queued on it reaches the frees kept
  // there, including any whose own host function could not be queued (keep()).
  void stream_ended(CUstream stream) noexcept;
  void all_streams_ended() noexcept;
  // A reset of `device` took its primary context (Note [Resetting the device] in
  // hooks/device_reset.h): its kept blocks go with it, as its live ones do.
  void forget_kept(int device) noexcept;

  // Kept blocks whose frees were reached are given up to the prefetch mover, which frees them
  // for room (Note [Dead blocks and the prefetch mover]).
  std::vector<uint64_t> dead() noexcept override;
  bool is_dead(CUdeviceptr base) noexcept override;
  bool give_up_if_dead(CUdeviceptr base) noexcept override;

 private:
  using Kept = tiers::StreamOrderedReuse::Block;

  // A new block through `allocate` (the arena's allocate_reusable() or allocate()), where the
  // kept blocks whose frees were reached give room first: those the device budget lacks, then
  // all of them should the budgets refuse the block (Note [Kept blocks give room to every
  // request]).
  template <typename Allocate>
  std::optional<CUresult> allocate_new(int device, uint64_t bytes, Allocate allocate) noexcept;
  // Whether the remap mover keeps blocks whose room its other allocations may take.
  bool remap_mover_keeps() const noexcept;
  // Gives `device`'s kept blocks whose frees were reached back to their mover, oldest first,
  // until `granules` went: each only if still kept, and with the prefetch mover not during a
  // capture (TieredBlocks::free_unless_capturing()). Whether any went.
  bool give_back(int device, uint64_t granules) noexcept;
  // The most granules `device` keeps for reuse.
  uint64_t kept_limit(int device) const noexcept;
  // Marks the frees reached on the streams of `device`'s kept blocks that have run all their
  // work (StreamOrderSeam::idle()).
  void find_idle_streams(int device) noexcept;

  // Held shared while streams of kept blocks are asked about, exclusively while one ends.
  std::shared_mutex questions_;
  const Config& config_;
  const core::Ledger& ledger_;
  TieredBudgets& budgets_;
  TieredBlocks& blocks_;
  PoolBooks& pools_;
  tiers::StreamOrderedReuse& reuse_;
  StreamOrderSeam& seam_;
};

}  // namespace vramspill::placement
