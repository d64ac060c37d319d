// The granule arena: tiered mode's memory for one device. Each allocation gets a range of
// address space of its own, backed granule by granule (or chunk by chunk) by physical memory on
// the device or on the host, and the backing of one granule can later change without the address
// changing.
//
// Note [The granule arena]
// - A block (one program allocation) owns a reserved range of whole granules (2 MiB,
//   kGranuleBytes). Each granule is backed by one physical granule of its own, device- or
//   host-located, or, in a block of 64 MiB and more, by a part of a chunk, a physical handle of
//   16 granules that the block maps and moves whole (Note [Chunks] in tiers/granule_chunks.h);
//   so any free physical granule can back any block, and a pooled chunk any large one: the
//   device never fragments, whatever the order of allocations and frees (GMLake's stitching, by
//   construction).
// - Every granule of a live block is mapped and device-accessible at all times. An evicted
//   granule is mapped to host memory, never unmapped, so a kernel that reaches a block through a
//   pointer the shim cannot see (inside a struct in device memory, inside a graph) is slow,
//   never wrong.
// - Physical granules a freed block gave back wait in a pool per kind and size (single granules,
//   chunks) and back the next block without a driver call; trim() gives the pooled ones beyond
//   what is kept back to the driver (Note [What the pools keep]).
// - What a block costs is counted in whole granules (device granules against the device
//   budget, host granules against the host limit): the rounding is the arena's, and it is paid
//   honestly. Deciding how many granules of a block go on the device is the caller's (placement
//   holds the budgets); the arena only carries it out.
// - Only the books take the arena's lock; driver calls run outside it (a cuMemMap can take tens
//   of microseconds), on granules and ranges no other thread can reach yet, or any more.
//
// Note [What the pools keep]
// trim() keeps, of each kind, the larger of the keep size (ArenaOptions) and the recent demand:
// the most granules of that kind moves took between two trims, decaying by an eighth at each
// trim where they took less. Allocations do not count, and a freed block takes its granules off
// the demand (the moves to come have that much less to move): a job that frees its blocks gets
// its budget back at once, as with cuMemFree. A job that moves its working set through a small
// budget takes back, step after step, the granules the last window gave up: the host granules
// its promotions freed are what its next evictions need. Trimmed to the keep size after each
// launch, those granules would go back to the driver and be made again at once, paying
// cuMemRelease, cuMemCreate and, for a granule that had moved, its home's unmap, map and access
// (Note [Granule homes] in tiers/granule_homes.h): on the H200 trace with a 3 GiB budget that
// churn cost as much as the homes saved. What is kept counts against the budgets as before
// (pooled granules are charged), and usable_device_granules() counts pooled device granules as
// room, so keeping them refuses nothing; give_back_device_granules() still gives back what
// another allocation needs.
// The pools keep chunks and singles apart (Note [Chunks] in tiers/granule_chunks.h), counting a
// chunk as its granules. trim() gives back whole handles while they fit above what it keeps, so a
// pool may keep up to a chunk less one granule beyond it; give_back_device_granules() gives back
// a whole chunk where that is what it takes to give back as much as asked.
//
// Note [An arena allocation is all or nothing]
// allocate() either returns a block whose every granule is mapped, or leaves nothing behind: on
// a failed cuMemCreate, cuMemMap or cuMemAddressReserve it unmaps what it mapped, puts the
// physical granules it took or made into the pools and gives back the range, and answers with
// the driver's error. A driver that also refuses to unmap or unreserve (a torn-down context)
// leaves those granules or that range to the driver; they are counted as leaked, never reused.
//
// Note [Moving a granule]
// move() changes which physical memory backs granules of live blocks, at the same addresses,
// inside a closed remap window (core/remap_window.h; the Exclusive token is a parameter, so no
// caller can move outside one). For a batch:
//   1. wait for the device's work: nothing queued before the window may run after a remap
//      (or, given a QueuedWork, for the work it says may touch the moving blocks);
//   2. take a physical granule of the new kind for each granule to move (pool, then driver; if
//      the driver runs out, the batch shrinks to what it has: moving less is never wrong), and
//      for each chunk to move, a chunk or as many singles (Note [Chunks] in
//      tiers/granule_chunks.h), with its home (Note [Granule homes] in tiers/granule_homes.h;
//      one the driver refuses drops the slot, or the chunk's slots, too);
//   3. copy each granule from the old granule's home into the new granule's home (one copy for
//      a run over which both sides' homes follow each other), giving the old granules homes too
//      where they have none; a copy that cannot be queued stops the batch before anything is
//      remapped;
//   4. while the copies run (they touch no block's address), for each run of consecutive
//      granules of a block, unmap the old backing at the block's address with one call, map the
//      new handles there (a call each: a chunk is one) and give them access with one more;
//      should the new mapping fail, the old one is mapped back (and should the run's unmap fail,
//      the run is remapped handle by handle); then wait for the copies: the window's time is the
//      longer of the copies and the VMM calls, not their sum;
//   5. pool the old granules, with their homes, and count.
// A free() of a block waits for a move in progress (they share move_mutex_): a block is never
// freed under the mover.
//
// Note [Staged promotions]
// A promotion made ahead of the launch that needs it (Note [Promoting ahead] in
// policies/eviction_policy.h) need not stop anything for its copy when the QueuedWork can order
// copies on the device (the tracked window's). stage() takes the device granules, with their
// homes, queues the copy into the homes on the arena's stream behind the work that may touch
// the block (QueuedWork::order_after: a cuStreamWaitEvent where the use
// tracker has an event, a host wait where it has none), and returns without waiting: the copy
// runs while the job's kernels do. The books put the granules on the device at once (the budgets
// and the policy count them there); the block's address keeps mapping the old host granules, so
// whatever touches the block meanwhile reaches the current bytes in place.
// A move() naming a staged block settles it first:
// - a promotion (the launch that touches it asks for one before it is queued) finishes it: waits
//   for the work queued on the block (QueuedWork::wait_for), copies again if any was queued
//   since the stage (a kernel may have written the host granules after the copy was queued: a
//   graph, or a launch that raced the stage), waits for the copies and remaps as step 4 of Note
//   [Moving a granule]. Only that wait and the remap stop the launch. "Queued since" is read
//   from the use tracker's marks, which only rise, not from the stream bits: a move of another
//   block takes the bits of a graph launch, which says nothing of whether the graph ran after
//   this block's copy (QueuedWork::queued_since);
// - an eviction unstages it: it waits for the copies and gives the new granules back to the
//   pool; the old ones never left the block's address, so nothing is copied.
// free() unstages before it unmaps. A stage takes the moving blocks' stream bits, and the "every
// block" ones, off the use tracker's books while its copy only waits for them on the device; no
// later move misses that work, because the first move after a stage waits for the arena's stream
// before it remaps (GranuleMover::stage_took_queued_work()), and the stream's copies follow the
// work the stage took.
// Unsafe as the tracked window is: a kernel that reaches a staged block through a pointer kept in
// device memory writes its host granules unseen, and the remap then loses what it wrote.
//
// Note [Moves copied on the stream]
// With a QueuedWork that can order copies on the device (the tracked window's), a move need not
// keep every thread's submissions waiting while its bytes are copied. move_on_stream() makes
// steps 1 to 4 of Note [Moving a granule] and, instead of waiting for the copies, records an
// event after them and returns (QueuedWork::names_every_use() must hold for every block: a block
// the use tracker does not know moves in the window). From then on every submission that may
// touch one of those blocks, and every one that cannot say what it touches, makes its stream wait
// for the event before its driver call (order_after_copies(), inside the window: the launch that
// asked for a promotion is the first), so the kernel finds the bytes there; a submission to a
// stream being captured waits for nothing, its graph's launch waiting for the copies instead
// (Note [Copies and captures] in tiers/driver_granule_ops.cpp). The window is closed only for
// the mappings, not for the copy.
// The old granules go to the pools at once, though the copy may still read them at their homes
// (and a remap that failed leaves new ones that the copy may still write): whatever
// takes them next on the arena's streams (a move, a stage) copies into them after the copy in
// flight, in epoch order (Note [Two copy lanes] in tiers/granule_ops.h) or after its run's mark
// (Note [Evictions ahead of promotions] in tiers/granule_mover.h), so a promotion can reuse at
// once the device granules an eviction just gave up. What takes pooled granules off the stream must not take those: allocate(), whose block
// the program writes as it likes, waits for the copies first (settle_copies()); trim() gives back
// only granules pooled before the copies in flight began (cuMemRelease must not free memory a
// copy uses: each pool's last unsettled pieces stay, GranulePools), and
// give_back_device_granules() waits for the copies when it needs more than those.
// The event is kept until it has passed: the next move, stage or move_on_stream retires what has
// (each in a closed window, so no submission is about to wait for an event it destroys); at most
// GranuleMover::kMaxCopiesInFlight batches are in flight, beyond which the host waits for a
// batch's copies in the window. Freeing a block a copy writes, and settle_copies(), wait for the
// arena's copies and retire them all, keeping their events for the next retirement in a closed
// window. The mover (tiers/granule_mover.h) keeps the copies in flight; the arena's books keep
// which pooled granules they may still use.
// A stage took stream bits that only the arena's stream waits for (Note [Staged promotions]): a
// move remaps without waiting for that stream (on the stream, and in the window too, where it
// remaps while its own copies run), so after a stage the first move waits for it on the host
// before it remaps (GranuleMover::stage_took_queued_work()).
// Unsafe as the tracked window is: a kernel that reaches such a block through a pointer kept in
// device memory may run before the copy and read what its new granules held before. So are the
// stream memory operations (cuStreamWriteValue and the like), which the shim does not hook.
//
// Note [Copies in flight beside a capture]
// The waits above are host waits, which beside a stream capture break it (Note [No moves during a
// capture] in placement/tiered_placement.h), and copies may be in flight when a capture begins
// (the tracked window's) or, a capture beginning mid-move, after: the program may still allocate
// and free beside the capture (cuMemAlloc, and cuMemFreeAsync on a stream not captured). So while
// a capture is in progress the arena's ops refuse to wait (GranuleOps::wait_for_copies), and:
// - allocate() takes no pooled granule a copy may still use, only settled ones and new handles;
// - free() of a block a copy still writes keeps its granules mapped and its range reserved, held
//   and charged as before, until the copies are over (the next settling, with the capture over,
//   finishes those frees: finish_frees_under_copies()); the program no longer sees the block.
// Elsewhere a refused wait is a failed one, whose granules stay the driver's (leaked).
//
// Note [Moves of dead contents]
// A block the program freed with cuMemFreeAsync may be kept for its next request (Note [Reuse in
// stream order] in tiers/stream_ordered_reuse.h); once its stream has reached the free, nothing
// will read what it holds, yet as a live block it is the coldest victim there is, and copying its
// bytes to the host and back is what the cuMemFree it stands in for would never cost. So a move
// of a block the options' DeadContents names dead (asked when the move is planned, in the closed
// window: no submission can touch the block until the window opens, and a request that takes the
// block meanwhile gets contents that are undefined anyway) only remaps: its slots get new
// granules, after step 1's wait, with no home and no copy.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/remap_window.h"
#include "tiers/dead_contents.h"
#include "tiers/granule_chunks.h"
#include "tiers/granule_mover.h"
#include "tiers/granule_ops.h"
#include "tiers/granule_pools.h"
#include "tiers/move_plan.h"

namespace vramspill::tiers {

struct ArenaOptions {
  // Idle physical granules trim() keeps, per kind: the next blocks then need no cuMemCreate.
  uint64_t keep_device_granules = 0;
  uint64_t keep_host_granules = 0;
  const DeadContents* dead = nullptr;  // none: every block's contents are copied when it moves
  // Note [Chunks] in tiers/granule_chunks.h (chunks of at most GranuleMover::kRunGranules).
  ChunkSizes chunks{};
};

// One live block, as the arena sees it.
struct ArenaBlock {
  CUdeviceptr base = 0;
  uint64_t bytes = 0;            // what the program asked for
  uint64_t granules = 0;         // the range, in granules (bytes rounded up)
  uint64_t device_granules = 0;  // of those, backed by device memory; the rest by host memory
  // Of the device granules, those staged (Note [Staged promotions]): their remap is still to come.
  uint64_t staged_granules = 0;
  uint64_t host_granules() const { return granules - device_granules; }
  uint64_t range_bytes() const { return granules * kGranuleBytes; }
};

struct ArenaStats {
  uint64_t blocks = 0;
  uint64_t device_granules = 0;  // backing live blocks
  uint64_t host_granules = 0;
  // Host granules that staged blocks' addresses still map (Note [Staged promotions]): held, and
  // pooled once the remap is done.
  uint64_t staged_host_granules = 0;
  uint64_t pooled_device_granules = 0;  // idle, kept for the next block
  uint64_t pooled_host_granules = 0;
  uint64_t homes = 0;  // granules mapped at their homes (Note [Granule homes])
  uint64_t created_granules = 0;   // made by the cuMemCreate calls that succeeded
  uint64_t released_granules = 0;  // given back by the cuMemRelease calls that succeeded
  // What the driver would not take back (Note [An arena allocation is all or nothing]).
  uint64_t leaked_granules = 0;
  uint64_t leaked_ranges = 0;
  // Granules left with no backing: a move could neither map the new one nor the old one back.
  uint64_t unbacked_granules = 0;
  // VMM calls the moves made (homes, remaps, and the granules they created and released), and
  // all the arena's, allocations and frees included.
  uint64_t move_vmm_calls = 0;
  uint64_t vmm_calls = 0;
};

// One block's part of a move: `granules` of its granules not of kind `to` become `to`
// (evictions give up the block's last device granules first, promotions bring its first host
// granules in first), rounded to whole chunks (Note [Chunks] in tiers/granule_chunks.h).
struct GranuleMove {
  CUdeviceptr base = 0;
  GranuleKind to = GranuleKind::kHost;
  uint64_t granules = 0;
};

struct MoveOutcome {
  CUresult result = CUDA_SUCCESS;  // the first driver error, if any stopped part of the batch
  uint64_t to_device = 0;          // granules moved in each direction
  uint64_t to_host = 0;
  // Of those, the granules whose copies the next submissions wait for on their streams (Note
  // [Moves copied on the stream]).
  uint64_t on_stream = 0;
};

// Step 1 of Note [Moving a granule] when something knows better than "all the device's work":
// the tracked window's (placement/tracked_work.h).
class QueuedWork {
 public:
  // Waits, through `ops`, for the work queued so far that may touch the blocks at `bases`.
  virtual CUresult wait_for(std::span<const uint64_t> bases, GranuleOps& ops) noexcept = 0;
  // Orders the copies queued next on `ops` after the work queued so far that may touch the
  // blocks at `bases`, waiting on the host only for what cannot be waited for on the device.
  // `since`: where the work queued from then on starts, for queued_since().
  virtual CUresult order_after(std::span<const uint64_t> bases, GranuleOps& ops,
                               uint64_t& since) noexcept = 0;
  // Whether work that may touch the block at `base` was queued after order_after() gave
  // `since` (Note [Staged promotions]: the staged copy may miss what it wrote).
  virtual bool queued_since(uint64_t base, uint64_t since) noexcept = 0;
  // Whether every submission that may touch the blocks at `bases` says so, and so can be made to
  // wait for their copy (Note [Moves copied on the stream]).
  virtual bool names_every_use(std::span<const uint64_t> bases) noexcept = 0;

 protected:
  QueuedWork() = default;
  ~QueuedWork() = default;
  QueuedWork(const QueuedWork&) = default;
  QueuedWork& operator=(const QueuedWork&) = default;
};

class GranuleArena {
 public:
  GranuleArena(GranuleOps& ops, const ArenaOptions& options) noexcept
      : ops_(ops), options_(options), mover_(ops) {}
  GranuleArena(const GranuleArena&) = delete;
  GranuleArena& operator=(const GranuleArena&) = delete;
  // Every granule, live or pooled, goes back to the driver.
  ~GranuleArena();

  // The number of granules a block of `bytes` takes.
  static constexpr uint64_t granules_for(uint64_t bytes) {
    return bytes / kGranuleBytes + (bytes % kGranuleBytes != 0 ? 1 : 0);
  }

  // A block of `bytes` (> 0), its first `device_granules` granules (at most granules_for(bytes))
  // backed by device memory and the rest by host memory, at *base. All or nothing (Note [An
  // arena allocation is all or nothing]).
  CUresult allocate(uint64_t bytes, uint64_t device_granules, CUdeviceptr* base) noexcept;

  // Unmaps the block that starts at `base`, pools its granules and gives its range back. The
  // caller has made sure no work can touch it any more. nullopt for an address that starts no
  // block (nothing changes then).
  std::optional<ArenaBlock> free(CUdeviceptr base) noexcept;

  // The live block that holds `address`, anywhere in its range.
  std::optional<ArenaBlock> block_containing(CUdeviceptr address) const noexcept;

  // Whether any block is staged (Note [Staged promotions]), without the lock: a launch's test
  // before it looks for staged blocks among its own.
  bool any_staged() const noexcept { return staged_blocks_.load(std::memory_order_relaxed) != 0; }

  // How many granules an eviction of `granules` (0: all) of the block at `base` moves, rounded up
  // to whole chunks (Note [Chunks] in tiers/granule_chunks.h): what its host granules cost.
  uint64_t eviction_granules(CUdeviceptr base, uint64_t granules) const noexcept;

  // Carries out `moves` (Note [Moving a granule]), settling the staged blocks they name first
  // (Note [Staged promotions]). Moves naming no live block are skipped. `queued`: what step 1
  // waits for; null: the whole device's work.
  MoveOutcome move(std::span<const GranuleMove> moves, const core::RemapWindow::Exclusive& window,
                   QueuedWork* queued = nullptr) noexcept;

  // Finishes the staged blocks `moves` promote, and moves nothing else (Note [Staged
  // promotions]): what move() does first. `queued`: as move()'s.
  MoveOutcome finish_staged(std::span<const GranuleMove> moves,
                            const core::RemapWindow::Exclusive& window,
                            QueuedWork* queued = nullptr) noexcept;

  // Stages the promotions among `moves` (Note [Staged promotions]); blocks staged already, and
  // evictions, are skipped. Counted as moved to the device.
  MoveOutcome stage(std::span<const GranuleMove> moves, const core::RemapWindow::Exclusive& window,
                    QueuedWork& queued) noexcept;

  // Carries out `moves` as Note [Moves copied on the stream] says, or as move() does when that
  // cannot be.
  MoveOutcome move_on_stream(std::span<const GranuleMove> moves,
                             const core::RemapWindow::Exclusive& window,
                             QueuedWork& queued) noexcept;

  // Carries out the evictions `moves` ahead of the promotions the caller moves next in the same
  // closed window, with move() or move_on_stream() (Note [Evictions ahead of promotions] in
  // tiers/granule_mover.h): their copies are left running, and the next batch's follow only the
  // runs whose granules they touch. `queued`: as move()'s; null (the safe window), the caller
  // calls settle() before the window opens again, whatever it moved next, and otherwise
  // end_batches_ahead().
  MoveOutcome evict_ahead(std::span<const GranuleMove> moves,
                          const core::RemapWindow::Exclusive& window,
                          QueuedWork* queued = nullptr) noexcept;
  // Waits for the copies in flight and retires them: the end of a safe window that evicted
  // ahead. The wait's error when it fails.
  CUresult settle(const core::RemapWindow::Exclusive& window) noexcept;
  // The end of a tracked window that evicted ahead: no later batch follows its marks (the
  // copies run on; submissions wait for them as after any move on the stream).
  void end_batches_ahead(const core::RemapWindow::Exclusive& window) noexcept;

  // Makes the work a submission queues next on `stream` wait for the copies in flight into the
  // blocks at `bases` (into any block when `everything`); `capturing`: a capture is in progress
  // (Notes [Moves copied on the stream], and [Copies and captures] in
  // tiers/driver_granule_ops.cpp). Called inside the window, before the driver call.
  CUresult order_after_copies(uint64_t stream, std::span<const uint64_t> bases, bool everything,
                              bool capturing) noexcept;

  // Gives pooled granules beyond what is kept back to the driver (Note [What the pools keep]).
  void trim() noexcept;
  // Gives up to `granules` pooled device granules back to the driver, below the keep size too
  // (memory another allocation of the device needs).
  void give_back_device_granules(uint64_t granules) noexcept;

  // The device's primary context was reset (Note [Resetting the device] in
  // hooks/device_reset.h): the copies in flight, their events and the copy lanes went with it.
  // The granules stay (VMM memory outlives contexts), and so do the blocks, which the program's
  // books free after.
  void forget_context() noexcept;
  ArenaStats stats() const noexcept;

  // Recomputes the counters from the blocks and pools; false (and the first difference in
  // `problem`) when they disagree. For tests and debug builds.
  bool check_invariants(std::string* problem = nullptr) const;

 private:
  struct Block {
    uint64_t bytes = 0;
    std::vector<Granule> granules;  // granule i backs base + i * kGranuleBytes
    // Note [Staged promotions]: staged[i].to (granules[staged[i].index] in the books) holds the
    // copy at its home, and staged[i].from is still mapped at the block's address.
    std::vector<Slot> staged;
    uint64_t staged_since = 0;  // QueuedWork::order_after()'s, for queued_since()
  };

  // The handles `wanted` asks for (Note [Chunks] in tiers/granule_chunks.h), appended to `taken`
  // in order, whole: from the pools first, releasing pooled handles of the other size where the
  // pools have only those, then from the driver; a chunk the driver refuses comes as singles.
  // `moving`: for a move (Note [What the pools keep]). Throws std::bad_alloc, before it takes
  // anything.
  CUresult take_pieces(std::span<const PieceShape> wanted, std::vector<Granule>& taken,
                       bool moving);
  // Gives pooled handles beyond `keep_device` and `keep_host` granules back to the driver, whole
  // chunks while they fit (with `at_least`, one more where it takes that to reach the keep size):
  // the settled ones only, or, with `settle`, after waiting for the copies in flight where it
  // must (Note [Moves copied on the stream]).
  void trim_to(uint64_t keep_device, uint64_t keep_host, bool settle, bool at_least) noexcept;
  // Unmaps granules [0, count) of the range at `base` (one call, or handle by handle where the
  // driver refuses the run); those the driver keeps are leaked and taken out of `granules`.
  // Returns whether the range is now empty of mappings.
  bool unmap_first(CUdeviceptr base, std::vector<Granule>& granules, std::size_t count);
  // Gives the range back; one the driver keeps is leaked.
  void unreserve(CUdeviceptr base, uint64_t granules);
  // Puts granules no block maps into the pools (or, if a pool cannot grow, back to the driver),
  // a chunk once, at its first part (its granules come together: Note [Chunks]).
  void pool(const std::vector<Granule>& granules) noexcept;
  void pool_one(const Granule& granule) noexcept;
  // Vacates the home of the whole handle `piece` and gives it back to the driver.
  void release(const Granule& piece) noexcept;
  ChunkSizes chunk_sizes() const noexcept;
  // Calls `take(index)` for each granule of `granules` (a block's) that a move of `granules`
  // (0: all) to `to` changes, whole pieces only (Note [Chunks]).
  template <typename Take>
  static void walk_move(const std::vector<Granule>& granules, GranuleKind to, uint64_t count,
                        Take take);
  static ArenaBlock view(CUdeviceptr base, const Block& block);

  // The plan of `moves` (Note [A move plan] in tiers/move_plan.h), with room in `fresh` for
  // `fresh_per_slot` granules a slot. Staged blocks are left out: a move settles them first, and
  // none is staged twice. Throws std::bad_alloc.
  MovePlan plan(std::span<const GranuleMove> moves, std::size_t fresh_per_slot) const;
  std::vector<Slot> plan_locked(std::span<const GranuleMove> moves) const;
  // move(), move_on_stream() and evict_ahead(): the copies as `mode` says (GranuleMover::
  // CopyMode), when they can.
  using CopyMode = GranuleMover::CopyMode;
  MoveOutcome carry_out(std::span<const GranuleMove> moves, QueuedWork* queued, CopyMode mode);
  // The books learn the homes the mover gave the granules `slots` move from.
  void learn_homes(std::span<const Slot> slots);
  // Remaps the dead slots of `plan` with no home and no copy, books them in `outcome` and their
  // old (or, where the remap failed, new) granules in its `fresh`, and takes them out of its
  // slots (Note [Moves of dead contents]).
  CUresult remap_dead(MovePlan& plan, MoveOutcome& outcome);
  // Step 5 of Note [Moving a granule]: the first `moved` of `slots` take their new granules in
  // the books and in `outcome`, and `fresh` takes their old granules and the others' unused new
  // ones. `fresh` has room for them (plan()): nothing here allocates.
  void book_moves(std::span<const Slot> slots, std::size_t moved, std::vector<Granule>& fresh,
                  MoveOutcome& outcome);
  // Waits for the copies before the new granules of `slots` go back to the pools; false, and the
  // granules leaked, when they may still be written.
  bool copies_over_for(std::span<const Slot> slots);
  // Stages one block's `slots` (Note [Staged promotions]) after the work before `since`; false
  // when it could not.
  bool stage_block(std::span<const Slot> slots, uint64_t since, CUresult& result);
  // Settles the staged blocks `moves` name (Note [Staged promotions]).
  void settle_staged(std::span<const GranuleMove> moves, QueuedWork* queued, MoveOutcome& outcome);
  // Finishes the staged blocks at `bases`: remapped where it can be, unstaged where not.
  void finish(std::span<const uint64_t> bases, QueuedWork* queued, MoveOutcome& outcome);
  // Gives up the staging of the block at `base`: its granules go back to where the block's
  // address maps them. How many granules went back to the host, and whether the staged copy,
  // which reads the block's address, is over (a failed wait leaves it maybe running).
  struct Unstaged {
    uint64_t granules = 0;
    bool copies_over = true;
  };
  Unstaged unstage(CUdeviceptr base);
  // The mover's retire_copies(), with move_mutex_ held.
  void retire_copies(bool all_done, bool window_closed);
  // Once no copy is in flight, no pooled granule is unsettled, and the frees made under copies
  // are finished.
  void forget_unsettled();
  // Unmaps the blocks freed under copies in flight and pools their granules (Note [Copies in
  // flight beside a capture]); with move_mutex_ held and no copy in flight.
  void finish_frees_under_copies();
  // Waits for the copies in flight and retires them, before pooled granules leave the arena's
  // stream (Note [Moves copied on the stream]); the wait's error when it fails.
  CUresult settle_copies();

  GranuleOps& ops_;
  const ArenaOptions options_;
  GranuleMover mover_;
  // Held by the moves, free() and settle_copies(): no block is freed under the mover.
  std::mutex move_mutex_;
  // Note [Evictions ahead of promotions], under move_mutex_: the last batch was one ahead, whose
  // marks the next batch of the window follows; and in the safe window it waited for the device's
  // work, so the next batch need not again.
  bool batch_ahead_ = false;
  bool device_waited_ahead_ = false;
  // Forgets a batch ahead: the window is settled, or a stage begins an epoch of its own.
  void end_of_batches_ahead() noexcept;
  mutable std::mutex mutex_;  // the books below
  std::map<CUdeviceptr, Block> blocks_;
  // Blocks the program freed while a capture kept the arena from waiting for the copies that
  // still write them (Note [Copies in flight beside a capture]): mapped and held, no longer live.
  std::map<CUdeviceptr, Block> freed_under_copies_;
  // Note [What the pools keep], by GranuleKind: granules taken since the last trim, and the
  // decaying demand.
  std::array<uint64_t, 2> taken_since_trim_{};
  std::array<uint64_t, 2> demand_{};
  GranulePools pools_;
  // Granules (a chunk counts as its granules), as ArenaStats says.
  uint64_t created_ = 0;
  uint64_t released_ = 0;
  uint64_t leaked_granules_ = 0;
  uint64_t leaked_ranges_ = 0;
  std::atomic<uint64_t> staged_blocks_{0};  // blocks whose `staged` is not empty; set under mutex_
};

}  // namespace vramspill::tiers
