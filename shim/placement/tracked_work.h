// The tracked remap window ([tiered] window = "tracked"): a move waits for the streams that used
// the blocks it moves, not for the whole device.
//
// Note [The tracked window]
// The safe window (Note [Remap window] in core/remap_window.h) drains the device before every
// move: a promotion made for one stream's launch waits for whatever every other stream has
// queued, a long kernel included. Use tracking knows better for most blocks. In tracked mode
// every submission that may touch tracked blocks marks its stream's bit on each of them while it
// holds the window, just before its driver call (UseTracker::mark_streams; Note [Stream slots]
// in core/stream_slots.h); one that the tracker cannot see into (a graph launch, a kernel whose
// arguments it cannot read, more blocks than a SubmissionUse lists) marks its bit for every
// block at once. A move, with the window closed, takes the bits of the blocks it moves and the
// "every block" bits, clearing them, and waits on just those streams, and on each only until the
// first event recorded after the blocks' last uses (Note [Last uses by event] in
// core/stream_slots.h; the whole stream where none was recorded yet); the other streams, and the
// work queued after those uses, keep running, so the copy overlaps them. Marking inside the window
// is what makes this exact: a submission that marked before the window closed has queued its work
// by then, and one that had only recorded (its lookups come before its promotions, outside the
// window) marks after the move, so its work counts for the next one. The submission that asked
// for a promotion is queued after the move returns, so its stream needs no event to wait on:
// on the host's clock the move is done before the launch exists.
// The move waits for the whole device, as the safe window does, when a bit says it must: a
// per-thread default stream (the mover's thread cannot name another thread's), a destroyed
// stream, more than 63 streams, a block the tracker does not track; and when a wait fails.
// Not safe, which is why `safe` stays the default: a kernel that reaches a tiered block through a
// pointer kept in device memory (a table of pointers, a linked structure) is not seen by use
// tracking, so the move does not wait for it and may remap under it (on a GPU: wrong bytes or a
// fault; on simcuda: a remap violation). Work in a context other than the one the mover waits in
// (driver/device_work.h) is not waited for by either window.
// The window is closed only for the remapping, not for the copies: the moving blocks are remapped
// at once and copied on the arena's stream, which every later submission that may touch them
// waits for on the device (Note [Moves copied on the stream] in tiers/granule_arena.h).
// Promotions made ahead of their launches are staged (Note [Staged promotions]): order_after()
// makes their copies wait on the device for the same events, and the window closes again only
// for the remap, at the launch that needs the block.
// Two devices with arenas: the tracked wait is one device's, but the bits, the retired slots and
// the legacy stream's slot are the process's, so then every move waits as the safe window does.
// An event on the legacy stream is itself a legacy-stream operation: blocking streams' later work
// waits for it, as it would for a kernel there (timing only).
// What it costs a launch, in tracked mode only: the marking, 57 ns for 2 blocks touched and 99 ns
// for 8 with 10^4 blocks tracked (tests/shim/bench/use_tracking_bench.cpp, MarkStreams: about six
// atomic operations and a compare-and-swap per block), and a cuEventRecord every kRecordEvery
// submissions of a stream (not measured on a GPU yet).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "core/use_tracker.h"
#include "tiers/granule_arena.h"

namespace vramspill::placement {

class TrackedWork final : public tiers::QueuedWork {
 public:
  // `devices_with_arenas`: bit d set once device d has an arena (Note [The tracked window]: the
  // tracked wait serves one device at most).
  TrackedWork(core::UseTracker& uses, const std::atomic<uint64_t>& devices_with_arenas) noexcept
      : uses_(uses), devices_with_arenas_(devices_with_arenas) {}

  CUresult wait_for(std::span<const uint64_t> bases, tiers::GranuleOps& ops) noexcept override;
  CUresult order_after(std::span<const uint64_t> bases, tiers::GranuleOps& ops,
                       uint64_t& since) noexcept override;
  bool queued_since(uint64_t base, uint64_t since) noexcept override;
  // Every block the use tracker tracks: a submission that may touch one lists it, or says it may
  // touch every block.
  bool names_every_use(std::span<const uint64_t> bases) noexcept override;

  // Waits before a move (a window may hold several): those for the moving blocks' streams alone,
  // and those for the whole device.
  uint64_t stream_waits() const noexcept { return stream_waits_.load(std::memory_order_relaxed); }
  uint64_t device_waits() const noexcept { return device_waits_.load(std::memory_order_relaxed); }

 private:
  // Takes the blocks' stream bits and waits for their streams' ends with `wait_for_ends`, or for
  // the whole device where those will not do.
  template <typename WaitForEnds>
  CUresult settle(std::span<const uint64_t> bases, tiers::GranuleOps& ops,
                  WaitForEnds&& wait_for_ends) noexcept;

  core::UseTracker& uses_;
  const std::atomic<uint64_t>& devices_with_arenas_;
  std::atomic<uint64_t> stream_waits_{0};
  std::atomic<uint64_t> device_waits_{0};
};

}  // namespace vramspill::placement
