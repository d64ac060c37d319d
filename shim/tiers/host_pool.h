// The pinned host pool: where `host` placement mode puts an overflow allocation (shim/README.md,
// "Placement modes"). Page-locked, device-mapped host memory is pinned in large regions ahead of
// need and suballocated into blocks; a block's address is what the program gets back from
// cuMemAlloc.
//
// Algorithm in brief: regions are pinned `step_bytes` at a time; a block larger than a quarter of
// a step gets a region of its own, sized for it (Note [Blocks with a region of their own]).
// Blocks are cut from the regions' free ranges by address-ordered best fit and merged back on
// free (tiers/free_space.h). When free room falls below the low-water mark, a background thread
// pins the next step (Note [Pinning ahead of need]). Before the pool pins a region for a block
// that finds no room, idle regions make way for it (Note [Coalescing idle regions]). When
// regions with no live block hold more than `release_idle_above`, they are unpinned and their
// bytes given back to the host budget. Every pinned byte is reserved in a core::HostBudget first.
//
// Note [The pool's own suballocator]
// mimalloc over the pinned region was the first plan (mi_manage_os_memory_ex as an exclusive arena,
// mi_heap_new_in_arena). Measured with Debian's mimalloc 2.0.9, dlopen()ed RTLD_LOCAL, over a 1 GiB
// arena (is_committed, is_large, exclusive):
//   - the arena must start 32 MiB-aligned (mimalloc's segment size): at base + 4 KiB the first
//     mi_heap_malloc crashes (SIGSEGV), so cuMemHostAlloc's page-aligned memory would need
//     over-allocating by 32 MiB per region;
//   - a heap is bound to the thread that made it (mimalloc's documentation: a heap may only
//     allocate in the thread that created it; its source also deletes a thread's heaps when the
//     thread exits; not measured here), while the pool is called from any application thread:
//     it would take a heap per thread per arena, or one owner thread every allocation waits on;
//   - an arena is never given back: 2.0.9 has no call to remove one, so idle release (item 2 of
//     the spill issue) is impossible, and every growth step would be a new arena needing its own
//     heaps (a heap allocates from one arena);
//   - multi-MiB blocks are rounded badly: usable size of a 2 MiB request is 2.5 MiB, 20 MiB takes
//     a whole 32 MiB arena block (32 fit in 1 GiB: 62% of it live), 26 MiB takes 32 MiB, 100 MiB
//     takes 128 MiB. PyTorch's segments are exactly these sizes;
//   - replaying ../shared/traces (tests/shim/tiers/pool_replay_bench.cpp; fragmentation = peak
//     pool bytes / peak live bytes, then allocs+frees per second on a 2-core VM):
//                                 this pool (1 GiB steps)  mimalloc arena    plain first fit
//       fullstep, segments        1.02   6.8 M/s           1.31  0.26 M/s    1.00  40 M/s
//       fullstep, tensors         1.04   5.4 M/s           1.33  1.0 M/s     1.02  7.6 M/s
//       forward-compiled, segs    1.02   5.6 M/s           1.33  0.36 M/s    1.00  37 M/s
//       forward-compiled, tensors 1.04   6.1 M/s           1.31  2.7 M/s     1.00  97 M/s
//     (first fit is one contiguous range that grows at its top: a bound no pinned pool of
//     separate regions can reach, and fast here because these traces leave few holes);
//   - on the good side: it never touched arena pages with madvise/mprotect/munmap/mmap (watched
//     by interposing them) with is_committed=true, whether is_large was set or not, even with
//     MIMALLOC_PAGE_RESET=1, and it returns NULL rather than OS memory when the arena is full.
// So the pool suballocates itself. Best fit over address-ordered free ranges, cut from the low
// end, merged on free: the classic policy with the lowest measured fragmentation on real
// programs (Johnstone & Wilson), and exact for PyTorch's 2 MiB-multiple segments. Metadata lives
// outside the pinned pages: the GPU can write into them, and a kernel overrunning its buffer
// must not corrupt the allocator's free lists. One mutex guards it all: spills happen at driver
// allocation rate (each cuMemAlloc already costs microseconds), not at malloc rate.
// What the step size costs: PyTorch's 100 MiB segments tiled 256 MiB steps badly (two per step,
// 56 MiB left over: the fullstep segments needed 1.14x their live bytes, against 1.02x with
// 1 GiB steps), hence the 1 GiB default. Since blocks above a quarter of a step get regions of
// their own, 256 MiB steps need 1.01x there (table in Note [Coalescing idle regions]).
//
// Note [Coalescing idle regions]
// A pinned region is one cuMemHostAlloc, one allocation to the driver, which answers pointer
// queries (a range's base and size) and checks copies per allocation; a block spanning two
// regions, even adjacent ones, would be two allocations to it (not tried on a GPU: never done).
// So free ranges of different regions never merge, and a block never spans two regions. What
// the pool can do is unpin and pin again: before it pins a region for a block that found no room,
// it unpins idle regions (no live block), the smallest first, until they hold what the new region
// will (coalesce_idle()). Their bytes go back to the budget before the new pin asks for its own,
// so the pool grows only by what idle memory does not cover, and the one region pinned replaces
// several that could not hold the block. The cost is the unpins (the pin happens anyway); a region
// is given up only when the pool would otherwise grow. The case: a trace from another program,
// with several streams, 0.7 to 2 GiB segments and empty_cache() bursts, where a 2 GiB segment got
// a region of its own while 8.6 GiB sat idle in 20 regions (tools/traces/synthetic_events.py
// writes such traces). Coalescing alone took those from 1.25-1.6 to 1.12-1.16; with Note [Blocks
// with a region of their own] as well, to the figures below.
// Replayed (tests/shim/tiers/pool_replay_bench.cpp, HostPool/sync: no idle release, every pin on
// the allocating thread; fragmentation = peak pool bytes / peak live bytes; before = one region
// per block above a step, best fit over every range, no coalescing; synN = synthetic_events.py
// --seed N, syn8 with --streams 2 --burst-every 5; pool figures vary by about 0.005 from run to
// run with the addresses mmap gives):
//                               1 GiB steps        256 MiB steps    first  granule
//                               before  after      before  after    fit    arena
//   fullstep, segments          1.019   1.019      1.138   1.014    1.000  1.000
//   fullstep, tensors           1.038   1.038      1.043   1.048    1.019  1.021
//   forward-compiled, segments  1.021   1.021      1.036   1.027    1.000  1.000
//   forward-compiled, tensors   1.037   1.037      1.006   1.010    1.001  1.061
//   syn1                        1.597   1.057      1.548   1.011    1.107  1.000
//   syn2                        1.249   1.029      1.247   1.006    1.071  1.000
//   syn3                        1.265   1.025      1.295   1.007    1.076  1.000
//   syn4                        1.224   1.047      1.184   1.005    1.060  1.000
//   syn5                        1.327   1.046      1.345   1.012    1.127  1.000
//   syn6                        1.318   1.028      1.294   1.009    1.059  1.000
//   syn7                        1.250   1.029      1.303   1.009    1.108  1.000
//   syn8                        1.508   1.024      1.483   1.002    1.004  1.000
// (The granule arena rounds each block to whole 2 MiB granules: nothing for PyTorch's segments,
// 6% on forward-compiled's small tensors.) What is left with 1 GiB steps is mostly the last step,
// pinned whole while little of it is used yet, and room in steps that blocks of up to 256 MiB
// leave: up to 1.06 on these traces, where 256 MiB steps stay at or below 1.05.
//
// Note [Blocks with a region of their own]
// A block above `own_region_above` (default a quarter of a step) gets a region of exactly its
// size, pinned on the allocating thread (its size is not known ahead), and takes free room only
// of exactly its size (PyTorch asks for the same segment sizes again and again). Split from a
// larger range, it would leave room that small blocks fill, and those would keep a region too
// large for them pinned after the large block is gone: in the synthetic traces above, that was
// most of what was left after coalescing. A small block takes room only in a range no larger
// than a step, so it never splits an idle region that was pinned for a large block either
// (coalescing gives that region up for a step when nothing else fits).
//
// Note [Pool granularity]
// Block sizes and addresses are multiples of `granularity` (default 4 KiB, at least 256 B, the
// alignment cuMemAlloc promises). A page keeps two blocks from sharing a page (a later
// cuMemHostRegister / madvise of a block's range stays possible) and caps the index size; it
// wastes at most 4 KiB per block, which is nothing next to the spill threshold (spill.min_size)
// and zero for PyTorch's 2 MiB-multiple segments.
//
// Note [Pinning ahead of need]
// Pinning costs about 0.35 s per GiB: a small allocation must never pay for it. After each
// allocation, if free room is below `low_water_bytes` (default: half a step), the pool asks its
// background thread to pin one more step. An allocation that finds no free range waits for a pin
// already requested or in flight, and pins synchronously only if there is none (the pool is truly
// empty) or when it is larger than a step (its own region). Idle release never takes free room
// below the low-water mark, so release and growth cannot chase each other.
// The thread starts lazily, at the first growth request (nothing runs when the shim is loaded),
// with every signal blocked (the program's signal handlers must run on the program's threads), and
// is named "vramspill-pin". fork(): the child has no such thread and the pool's lock may be held;
// the shim is pass-through in a forked child (Note [Entering the shim] in hooks/shim_state.h), so
// it never calls the pool there (CUDA itself is unusable in the child). exit(): the shim never
// destroys its pool (threads may allocate during exit); the thread is then ended by exit_group,
// possibly inside the pin function. A HostPool that is destroyed (tests, tools) stops and joins it
// first.
//
// Note [Unpinning off the stream's callback]
// A block freed by cuMemFreeAsync goes back to the pool from a host function the driver runs in
// stream order, and a host function must not call CUDA; unpinning is cuMemFreeHost. So such a
// free (Unpinning::kLater) only asks the background thread to release idle regions.
//
// Note [Failure inside the pool]
// Methods are noexcept and the pool never aborts the program: a failed index allocation
// (std::bad_alloc) makes allocate() return nullptr, or leaks the block's range on free (counted
// in internal_errors). A pin that fails, or a reservation the host budget refuses, makes
// allocate() return nullptr (the caller returns CUDA_ERROR_OUT_OF_MEMORY) and leaves every live
// block as it was.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/host_budget.h"
#include "tiers/free_space.h"
#include "tiers/pinned_memory_ops.h"

namespace vramspill::tiers {

struct HostPoolOptions {
  uint64_t step_bytes = uint64_t{1} << 30;            // pinned per growth step
  // Larger blocks get a region of their own (Note [Blocks with a region of their own]); at most
  // step_bytes; 0 = step_bytes / 4.
  uint64_t own_region_above = 0;
  uint64_t low_water_bytes = 0;                       // free room kept ahead; 0 = step_bytes / 2
  uint64_t release_idle_above = uint64_t{2} << 30;    // idle pinned bytes kept; beyond: unpinned
  uint64_t granularity = 4096;                        // Note [Pool granularity]; power of two
  bool grow_in_background = true;                     // false: every pin on the allocating thread
};

struct HostPoolStats {
  uint64_t pinned_bytes = 0;  // regions pinned now (usable bytes)
  uint64_t used_bytes = 0;    // blocks handed out (rounded to the granularity)
  uint64_t idle_bytes = 0;    // regions with no live block
  uint64_t largest_free_block = 0;
  uint64_t peak_pinned_bytes = 0;
  uint64_t peak_used_bytes = 0;
  uint64_t regions = 0;
  uint64_t live_blocks = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t failed_allocations = 0;
  uint64_t pins_on_allocation_path = 0;  // pins an allocation waited for (own region or empty pool)
  uint64_t pins_ahead = 0;               // pins by the background thread
  uint64_t waits_for_background_pin = 0;
  uint64_t unpins = 0;
  uint64_t coalescings = 0;  // idle regions pinned again as one (Note [Coalescing idle regions])
  uint64_t pin_failures = 0;
  uint64_t budget_refusals = 0;
  uint64_t internal_errors = 0;
};

class HostPool {
 public:
  // `budget` must outlive the pool. Options are sanitised (granularity raised to a power of two
  // of at least 256, step rounded up to it).
  HostPool(HostPoolOptions options, PinnedMemoryOps ops, core::HostBudget& budget) noexcept;
  // Stops the background thread and unpins every region, live blocks or not.
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // A block of at least `bytes`, aligned to the granularity; nullptr for 0 bytes or when the pool
  // cannot grow (host budget, pin failure). Thread-safe.
  void* allocate(uint64_t bytes) noexcept;
  // Whether free() may unpin idle regions on the calling thread, or must leave that to the
  // background thread (Note [Unpinning off the stream's callback]).
  enum class Unpinning { kNow, kLater };

  // Frees a block allocate() returned and gives its size (rounded to the granularity); nullopt
  // for anything else (not ours, interior pointer, already freed). Thread-safe, any thread.
  std::optional<uint64_t> free(void* block, Unpinning unpinning = Unpinning::kNow) noexcept;
  // Whether `p` lies inside memory the pool has pinned (a block or free room).
  bool owns(const void* p) const noexcept;
  // The start of the live block that holds `p` (any byte of it); nullopt if none does.
  std::optional<uint64_t> block_start(const void* p) const noexcept;

  // Asks the background thread to pin up to the low-water mark now, e.g. at start-up, so that
  // even the first spill does not wait. Returns at once.
  void warm_up() noexcept;
  // Waits until no pin is requested or in flight (tests; orderly shutdown).
  void wait_for_background_pins() noexcept;
  // Stops pinning ahead for good and waits for a pin in flight (at process exit, so that the
  // background thread is not inside the driver while the driver tears down).
  void stop_background_pinning() noexcept;

  HostPoolStats stats() const noexcept;
  const HostPoolOptions& options() const noexcept { return options_; }

 private:
  struct Region {
    uint64_t start = 0;  // usable range: granularity-aligned
    uint64_t bytes = 0;
    void* pinned = nullptr;  // what pin() returned, and its size, for unpin()
    uint64_t pinned_bytes = 0;
    uint64_t used = 0;
  };

  enum class Take { kTaken, kNoRoom, kFailed };
  // A block of `bytes` from a free range of at most `most` bytes.
  Take take_locked(uint64_t bytes, uint64_t most, uint64_t& block) noexcept;
  void charge_locked(Region& region, uint64_t bytes) noexcept;
  // Pins a region of at least `bytes` (outside the lock) and adds it under the lock, the first
  // `claim` bytes as a live block; returns the region's start, nullopt on failure.
  std::optional<uint64_t> grow(std::unique_lock<std::mutex>& lock, uint64_t bytes, uint64_t claim,
                               bool ahead) noexcept;
  bool start_background_thread_locked() noexcept;
  void request_growth_locked() noexcept;
  void request_idle_release_locked() noexcept;
  void release_idle(std::unique_lock<std::mutex>& lock) noexcept;
  // Unpins the smallest idle regions until they hold at least `bytes` (all of them if they hold
  // less), before the caller pins a region (Note [Coalescing idle regions]).
  void coalesce_idle(std::unique_lock<std::mutex>& lock, uint64_t bytes) noexcept;
  // Takes the idle region `idle` out of the books, for the caller to unpin outside the lock;
  // nullopt (and nothing changes) if it is not one free range.
  std::optional<Region> retire_locked(std::map<uint64_t, Region>::iterator idle) noexcept;
  void unpin(const Region& region) noexcept;
  void grower_main() noexcept;
  uint64_t free_room_locked() const noexcept { return pinned_bytes_ - used_bytes_; }
  std::map<uint64_t, Region>::iterator region_of_locked(uint64_t address) noexcept;
  uint64_t round_up(uint64_t bytes) const noexcept;
  // What a region is pinned larger than its usable bytes, to align its start to the granularity.
  uint64_t alignment_slack() const noexcept;

  HostPoolOptions options_;
  PinnedMemoryOps ops_;
  core::HostBudget& budget_;

  mutable std::mutex mutex_;
  std::condition_variable grower_wake_;  // growth requested, or stopping
  std::condition_variable pin_done_;     // a pin finished (regions may have changed)
  std::thread grower_;
  bool grower_failed_to_start_ = false;
  bool growth_requested_ = false;
  bool release_requested_ = false;  // idle regions to unpin on the background thread
  bool pin_in_flight_ = false;  // a step pin (background or synchronous) is running
  bool background_pin_failed_ = false;  // no retry ahead of need until memory is freed
  bool stopping_ = false;

  std::map<uint64_t, Region> regions_;             // by usable start
  FreeSpace free_space_;
  // Live block start -> bytes; ordered, so block_start() can find the block around an address.
  std::map<uint64_t, uint64_t> blocks_;
  uint64_t pinned_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t idle_bytes_ = 0;
  HostPoolStats counters_;  // the event counts and peaks; the rest is computed in stats()
};

}  // namespace vramspill::tiers
