// The tiered blocks that stream-ordered requests made (cuMemAllocAsync, cuMemAllocFromPoolAsync in
// tiered mode: Note [Stream-ordered requests in the arena] in placement/stream_ordered_blocks.h),
// and those the program freed with cuMemFreeAsync, kept for its next requests as a driver's pool
// keeps its freed memory. Driver-free: blocks, devices and streams are plain numbers, and
// placement::StreamOrderedBlocks does the rest (the host function that says a stream has reached
// a free, through its seam; the movers' frees).
//
// Note [Reuse in stream order]
// A block freed on stream S may still be in use by the work queued on S before the free; work
// queued on S after it runs later, so S's next request of the same size may have the block at
// once (what the driver's pools do, and what makes a job that frees and allocates the same sizes
// every step map nothing after its first step). Another stream's request may have it only once S
// has reached the free (reached(), from a host function queued on S at the free). Same size
// means the same number of granules: the block's range is whole granules, so nothing changes but
// the size the ledger records. Among the fitting blocks the oldest is taken, so that a job that
// frees and allocates in the same order gets the same blocks back, whose granules the policy has
// already placed. A block of a stream the program destroyed, or of a context it tore down, is
// given only once reached: the stream's handle may come back for a new stream. Kept blocks stay
// blocks of their mover (the arena, or the prefetch mover), so their granules, wherever they are,
// count in the budgets as any block's do (Note [Tiered budgets]), and a kept block may be evicted
// like a cold block, but without its bytes once its free is reached (Note [Moves of dead
// contents] in tiers/granule_arena.h; the prefetch mover frees it instead, give_up_if_reached(),
// Note [Dead blocks and the prefetch mover] in placement/stream_ordered_blocks.h). The kept
// granules of a device are bounded (keep() refuses past `limit`), and a request that the room
// cannot otherwise take gets kept blocks given up to their mover first (oldest_reached()).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tiers/dead_contents.h"

namespace vramspill::tiers {

struct StreamOrderedReuseStats {
  uint64_t made = 0;           // requests that made a new block
  uint64_t same_stream = 0;    // requests served by a block freed on their own stream
  uint64_t other_stream = 0;   // requests served by a block another stream had reached
  uint64_t given_up = 0;       // kept blocks given back to the arena
  uint64_t kept_granules = 0;  // now, all devices
};

class StreamOrderedReuse final : public DeadContents {
 public:
  struct Block {
    uint64_t base = 0;
    uint64_t granules = 0;
  };

  StreamOrderedReuse() = default;
  StreamOrderedReuse(const StreamOrderedReuse&) = delete;
  StreamOrderedReuse& operator=(const StreamOrderedReuse&) = delete;

  // A stream-ordered request made the block at `base`; false if it cannot be remembered (out of
  // memory), in which case its cuMemFreeAsync frees it as any tiered block's.
  bool made(uint64_t base) noexcept;

  // The live block at `base` was freed some other way (cuMemFree): it is no longer one of these.
  void forgotten(uint64_t base) noexcept;

  // cuMemFreeAsync of `base` on `stream`: the block is kept, and the ticket returned for
  // reached(); 0 when `base` is not a live block of these, or `device` would keep more than
  // `limit` granules (the caller frees it as any tiered block).
  uint64_t keep(int device, uint64_t base, uint64_t granules, uint64_t stream,
                uint64_t limit) noexcept;

  // `stream` has run past the free that kept `ticket`'s block: any stream may have it now. A
  // block taken meanwhile is not affected.
  void reached(uint64_t ticket) noexcept;

  // Undoes keep() (the host function could not be queued): the block, if still kept, which the
  // caller frees in stream order.
  std::optional<Block> withdraw(uint64_t ticket) noexcept;

  // A kept block of `granules` on `device` for a request on `stream` (Note [Reuse in stream
  // order]), live again; nullopt when none may serve it. `reached`: its stream had reached its
  // free, so that no work may touch it any more.
  struct Taken {
    uint64_t base = 0;
    bool reached = false;
    bool same_stream = false;  // freed on the request's stream
  };
  std::optional<Taken> take(int device, uint64_t granules, uint64_t stream) noexcept;

  // A block take() gave is given back to the arena instead of serving the request (counted as
  // given up, not as served).
  void give_up_taken(const Taken& taken) noexcept;

  // The kept blocks whose streams have reached their frees, of every device (none when memory
  // runs out).
  std::vector<uint64_t> reached_blocks() const noexcept;
  // Whether the block at `base` is kept and its stream has reached its free.
  bool is_reached(uint64_t base) const noexcept;
  // The kept block at `base`, if its stream has reached its free: no longer kept, for the caller
  // to free (Note [Dead blocks and the prefetch mover] in placement/stream_ordered_blocks.h).
  bool give_up_if_reached(uint64_t base) noexcept;

  // Kept blocks of `device` whose streams have reached their frees, oldest first, until they
  // hold `granules` or none is left (none when memory runs out): still kept, for the caller to
  // give up one by one (give_up_if_reached()) as its mover frees each.
  std::vector<Block> oldest_reached(int device, uint64_t granules) const noexcept;

  // The streams of `device`'s kept blocks whose frees are not known to be reached, at most
  // `most` (each once), and the first ticket a free kept after this call gets.
  struct Unreached {
    std::vector<uint64_t> streams;
    uint64_t later_tickets = 0;
  };
  Unreached unreached_streams(int device, std::size_t most) const noexcept;
  // Everything queued on `stream` before it was asked has run: the frees kept on it before that
  // (tickets below `later_tickets`, from the unreached_streams() that named it) are reached. A
  // free kept meanwhile, between the question and the answer, may not be.
  void stream_idle(uint64_t stream, uint64_t later_tickets) noexcept;

  // The program is destroying `stream` (or, all_streams_ended(), a context): blocks freed on it
  // wait for reached() whatever stream asks. Returns the tickets of those not reached yet (those
  // found when memory runs out), for a last host function on the stream to reach.
  std::vector<uint64_t> stream_ended(uint64_t stream) noexcept;
  void all_streams_ended() noexcept;
  // A reset of `device` (Note [Resetting the device] in hooks/device_reset.h): every block kept
  // for it leaves the books, reached or not, for the caller to forget as the reset's.
  std::vector<Block> withdraw_all(int device) noexcept;

  StreamOrderedReuseStats stats() const noexcept;

  // A kept block whose stream has reached its free (Note [Moves of dead contents] in
  // tiers/granule_arena.h). Takes only this object's lock, which is never held while calling out.
  bool dead(uint64_t base) const noexcept override;

 private:
  // A stream no request can be on: the kept block's stream ended.
  static constexpr uint64_t kNoStream = ~uint64_t{0};

  struct Kept {
    uint64_t base = 0;
    uint64_t stream = 0;
    bool reached = false;
  };
  using Size = std::pair<int, uint64_t>;  // device, granules
  // Kept blocks of one size by ticket: tickets grow, so the first is the oldest.
  using Bucket = std::map<uint64_t, Kept>;

  mutable std::mutex mutex_;
  std::unordered_set<uint64_t> live_;           // guarded by mutex_
  std::unordered_set<uint64_t> dead_;           // kept blocks reached; guarded by mutex_
  std::map<Size, Bucket> kept_;                 // guarded by mutex_
  std::unordered_map<uint64_t, Size> size_of_;  // ticket -> its bucket; guarded by mutex_
  std::map<int, uint64_t> kept_granules_;       // by device; guarded by mutex_
  uint64_t next_ticket_ = 1;                    // guarded by mutex_
  StreamOrderedReuseStats stats_;               // guarded by mutex_

  void reached_locked(Kept& kept);
  // Removes `kept` from its bucket and the books.
  void erase_locked(std::map<Size, Bucket>::iterator bucket, Bucket::iterator kept);
};

}  // namespace vramspill::tiers
