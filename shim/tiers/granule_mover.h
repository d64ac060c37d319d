// The granule arena's mover: it carries out the moves the arena plans (Note [Moving a granule]
// and Note [Moves copied on the stream] in tiers/granule_arena.h), and holds what the moving
// needs and the books do not: the granules' homes (Note [Granule homes] in
// tiers/granule_homes.h), the copies between them, the remaps of the blocks' addresses run by
// run, and the copies left in flight on the arena's streams (Note [Two copy lanes] in
// tiers/granule_ops.h). The arena (tiers/granule_arena.h)
// keeps the books: blocks, pools, allocate, free, trim, the plans (tiers/move_plan.h) and what
// moved.
//
// The arena calls it with its move lock held, except order_after_copies(), copies_pending(),
// copying_into(), vacate() (a trim) and the counters, which any thread may call.
//
// Note [Evictions ahead of promotions]
// A launch whose promotions need room evicts first, then promotes into the granules the
// evictions gave up: two batches, which would copy one after the other (each batch an epoch,
// Note [Two copy lanes] in tiers/granule_ops.h), paying the bytes out and then the bytes in. So
// the evictions are copied ahead (CopyMode::kAhead): after each of their runs the lane is marked
// (an event), and each granule handle the run touched remembers that mark. The next batch does
// not begin an epoch: each of its runs first waits, on the device, for the latest mark of the
// other lane among the handles it touches, so a promotion into a granule an eviction still reads
// follows that eviction's run alone, and the two directions overlap run by run. What else the
// batch touches is ordered already: granules of earlier epochs by the epoch the batch ahead
// began, and those on its own lane by stream order. Only the next batch of the same closed
// window follows the marks (GranuleArena keeps which batch that is); they are given back after
// it, or when another batch or a stage comes first, or when the window is settled. A mark that
// cannot be kept makes the next batch begin an epoch instead.
// The batch ahead leaves its copies running: in the tracked window submissions that touch its
// blocks wait for them on the device, as after any move on the stream; in the safe window the
// caller waits for them before the window opens (GranuleArena::settle()).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "tiers/granule_homes.h"
#include "tiers/granule_ops.h"
#include "tiers/move_plan.h"

namespace vramspill::tiers {

class GranuleMover {
 public:
  explicit GranuleMover(GranuleOps& ops) noexcept : ops_(ops), homes_(ops) {}
  // Gives back the marks of a batch ahead no batch followed (Note [Evictions ahead of
  // promotions]).
  ~GranuleMover() { drop_marks(); }
  GranuleMover(const GranuleMover&) = delete;
  GranuleMover& operator=(const GranuleMover&) = delete;

  // Gives the granules `which` names in `slots` the homes they lack (Note [Granule homes]), a
  // chunk's whole (Note [Chunks] in tiers/granule_chunks.h): the slots whose granule gets none are
  // dropped, their new granules going to `fresh`. The first driver error, if any.
  CUresult give_homes(std::vector<Slot>& slots, Granule Slot::*which, std::vector<Granule>& fresh);
  // Unmaps the home of the whole handle `piece`, if it has one, before it goes back to the
  // driver; false when the driver keeps the mapping.
  bool vacate(const Granule& piece) noexcept;

  // What copy_and_remap() does with its copies once queued: waits for them; leaves them running
  // as Note [Moves copied on the stream] says, where an event can be recorded after them; or
  // leaves them running ahead of the next batch's, as Note [Evictions ahead of promotions] says.
  enum class CopyMode : uint8_t { kWait, kKeepRunning, kAhead };
  // Steps 3 and 4 of Note [Moving a granule] for `slots`, whose granules all have homes, copied
  // as `mode` says; after a batch copied kAhead, its copies follow only the runs of that batch
  // whose granules they touch.
  struct Copied {
    std::size_t moved = 0;    // the slots before it were remapped, the rest not
    bool in_flight = false;   // whether submissions are to wait for the copies
    bool copies_over = true;  // false: the copies could not be waited for
  };
  Copied copy_and_remap(std::span<const Slot> slots, CopyMode mode, CUresult& result);
  // Queues the copies of `slots` into their new granules' homes, from the block's address (the
  // old granules still mapped there) or, with `from_homes`, from the old granules' homes: one
  // copy per run over which both sides follow each other, on the lanes of their directions (Note
  // [Two copy lanes] in tiers/granule_ops.h), in an epoch of their own unless `after_marks`
  // (Note [Evictions ahead of promotions]); with `marking`, each run marked.
  CUresult copy_into_homes(std::span<const Slot> slots, bool from_homes, bool marking = false,
                           bool after_marks = false);
  // Step 4 for `slots`: how many were remapped; a failure stops there. A run takes at most
  // kRunGranules granules (128 MiB), so that its handles fit on the stack, and whole handles on
  // both sides (Note [Chunks] in tiers/granule_chunks.h): a chunk is at most kRunGranules.
  static constexpr std::size_t kRunGranules = 64;
  std::size_t remap(std::span<const Slot> slots, CUresult& result);

  // Note [Moves copied on the stream]: at most kMaxCopiesInFlight batches' copies are in
  // flight, beyond which the host waits for a batch's copies in the window.
  static constexpr std::size_t kMaxCopiesInFlight = 8;
  bool room_for_copies() const noexcept { return copies_pending() < kMaxCopiesInFlight; }
  // Makes room for kMaxCopiesInFlight records, so that copy_and_remap() allocates none. Throws
  // std::bad_alloc.
  void reserve_for_copies();
  std::size_t copies_pending() const noexcept {
    return copies_pending_.load(std::memory_order_acquire);
  }
  // Retires the copies in flight that are done (all of them when `all_done`: the caller waited
  // for the copies). Their events are destroyed only when `window_closed` (no submission can be
  // about to wait for one); otherwise they are kept for the next retirement.
  void retire_copies(bool all_done, bool window_closed);
  // Gives back the marks of the batch ahead: the next batch has followed them, a new epoch made
  // them moot, or no batch of the same window follows (Note [Evictions ahead of promotions]).
  void drop_marks() noexcept;
  // A reset took every copy in flight and every event with its context (GranuleOps::
  // forget_context): all are forgotten, none destroyed.
  void forget_copies() noexcept;
  // Waits for the copies in flight and retires them (the window may be open); the wait's error
  // when it fails.
  CUresult settle_copies();
  // Whether a copy in flight writes what the block at `base` maps.
  bool copying_into(CUdeviceptr base) const;
  // Makes the work a submission queues next on `stream` wait for the copies in flight into the
  // blocks at `bases` (into any block when `everything`); `capturing`: a capture is in
  // progress. Called inside the window, before the driver call.
  CUresult order_after_copies(uint64_t stream, std::span<const uint64_t> bases, bool everything,
                              bool capturing) noexcept;
  // A stage ordered its copies after work whose stream bits it took (Note [Staged promotions]):
  // until the arena's stream is waited for, a move must wait for it before it remaps.
  void stage_took_queued_work() noexcept { stage_waits_queued_ = true; }
  // Waits for the arena's stream if a stage took work it alone waits for, before a remap: the
  // work is over once the stream is (Note [Moves copied on the stream]); the wait's error.
  CUresult follow_staged_work();

  // Adds the VMM calls made while it lives to the moves' count. A trim() on another thread
  // meanwhile counts too: the figure errs high, never low.
  class CallCounter {
   public:
    explicit CallCounter(GranuleMover& mover) noexcept
        : mover_(mover), before_(mover.ops_.vmm_calls()) {}
    ~CallCounter() {
      mover_.move_vmm_calls_.fetch_add(mover_.ops_.vmm_calls() - before_,
                                       std::memory_order_relaxed);
    }
    CallCounter(const CallCounter&) = delete;
    CallCounter& operator=(const CallCounter&) = delete;

   private:
    GranuleMover& mover_;
    uint64_t before_;
  };

  uint64_t homes() const noexcept { return homes_.settled(); }
  uint64_t move_vmm_calls() const noexcept {
    return move_vmm_calls_.load(std::memory_order_relaxed);
  }
  // Granules left with no backing: a remap could neither map the new one nor the old one back.
  uint64_t unbacked_granules() const noexcept {
    return unbacked_granules_.load(std::memory_order_relaxed);
  }

 private:
  // One batch's copies in flight.
  struct CopyInFlight {
    uint64_t event = 0;
    std::vector<uint64_t> bases;  // of the blocks whose addresses map what the copies write
  };

  // Step 4 for one run of consecutive granules of a block, handle by handle: the driver refused
  // the run's unmap. How many were remapped.
  std::size_t remap_one_by_one(std::span<const Slot> run, CUresult& result);
  // Queues the copy of one run of `slots` on `lane`, after the marks of the batch ahead that
  // cover what it touches (`after_marks`), and marks it (`marking`).
  CUresult copy_run(std::span<const Slot> run, CUdeviceptr source, CopyLane lane, bool marking,
                    bool after_marks);
  // Records an event after the copies of a batch copied ahead (CopyMode::kAhead): on the to-host
  // lane alone when they are all evictions, so that the next batch's promotions need not follow
  // them all. CUDA_SUCCESS with *event set, or the driver's error.
  CUresult record_ahead(std::span<const Slot> slots, uint64_t* event);

  // Note [Evictions ahead of promotions]: by lane, the marks of the batch ahead in order, and for
  // each granule handle its copies touched, the lane and index of the mark after it.
  struct Marked {
    CopyLane lane = CopyLane::kToHost;
    std::size_t index = 0;
  };
  std::array<std::vector<uint64_t>, 2> marks_;
  std::unordered_map<GranuleHandle, Marked> marked_;
  bool marks_lost_ = false;  // a mark could not be kept: the next batch begins an epoch

  GranuleOps& ops_;
  GranuleHomes homes_;
  mutable std::mutex mutex_;  // copies_in_flight_, which submissions read
  std::vector<CopyInFlight> copies_in_flight_;  // changed only by the arena's move lock holder
  std::atomic<std::size_t> copies_pending_{0};  // copies_in_flight_.size(), read without a lock
  std::vector<uint64_t> spent_events_;  // of copies retired outside a closed window
  bool stage_waits_queued_ = false;
  std::atomic<uint64_t> move_vmm_calls_{0};
  std::atomic<uint64_t> unbacked_granules_{0};
};

}  // namespace vramspill::tiers
