// The pinned host pool: where `host` placement mode puts an overflow allocation (shim/README.md,
// "Placement modes"). Page-locked, device-mapped host memory is pinned in large regions ahead of
// need and suballocated into blocks; a block's address is what the program gets back from
// cuMemAlloc.
//
// Algorithm in brief: regions are pinned `step_bytes` at a time, and blocks no larger than a
// quarter of a step (`own_region_above`) are cut from their free ranges by address-ordered best
// fit and merged back on free (tiers/free_space.h). A larger block gets a region of its own,
// pinned when it is made (Note [Regions of their own for large blocks]). When free room falls
// below the low-water mark, a background thread pins the next step (Note [Pinning ahead of
// need]). When regions with no live block hold more than `release_idle_above`, they are unpinned
// and their bytes given back to the host budget. Every pinned byte is reserved in a
// core::HostBudget first.
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
// (That table predates regions of their own: Note [Regions of their own for large blocks].)
//
// Note [Regions of their own for large blocks]
// A pinned region is one cuMemHostAlloc, one allocation to the driver (pointer queries answer
// per allocation), so free ranges of different regions never merge and a block never spans two
// regions. Under several streams, 0.7-2 GiB segments and empty_cache() bursts (traces from
// tools/traces/synthetic_events.py), large blocks cut from shared steps left holes that smaller
// blocks filled partly, and then found no room while gigabytes sat idle in regions too small for
// them. Even first fit over one contiguous range, which no set of separate regions can beat,
// needs up to 1.13x the live bytes there. So a block above a quarter of a step is not cut from a
// step: it gets a region of exactly its size, as cuMemAlloc gives each allocation its own, and
// leaves no hole when freed: the whole region is idle, and the idle release unpins it (beyond
// `release_idle_above`) or a later large block that it exceeds by at most an eighth takes it as
// it is. A step then holds only blocks of at most a quarter of it, so any idle step holds any
// shared block and the pool never misses while shared room sits idle (steps shrunk near the
// host limit aside: Note [Near the host limit]).
// What it costs: such a block is pinned on the allocating thread (its size is known only then),
// which the pool already did for blocks above a step. With the shim's default keep, the bytes
// pinned on that thread are 0-8% more than the previous design (large blocks in shared steps,
// idle regions pinned again as one by the background thread) pinned there with 256 MiB steps,
// and 10-26% more with 1 GiB steps, while the total pinned falls. With 256 MiB steps PyTorch's
// 100 MiB segments are blocks of their own too (cut from steps, two per step left 56 MiB over),
// which is why the default step went from 1 GiB to 256 MiB; against the old default, the
// synthetic traces pin up to 37% more on the allocating thread.
// Replayed (tests/shim/tiers/pool_replay_bench.cpp, HostPool/settled: the background thread
// finishes its work between calls, release_idle_above = 1 GiB as the shim's default; figures:
// peak pool bytes / peak live bytes, then GiB pinned on the allocating thread / in all; before:
// the previous design; synN = synthetic_events.py --seed N, syn8 with --streams 2
// --burst-every 5; the GiB pinned vary by about 1 between runs, with the background thread's
// timing):
//                         before:                       now:                          first  tiered
//                         256 MiB steps  1 GiB steps    256 MiB steps  1 GiB steps    fit    arena
//   fullstep, segs        1.138  59/ 65  1.019  21/ 58  1.015  55/ 58  1.019  21/ 58  1.000  1.000
//   fullstep, tensors     1.043  46/ 53  1.038  31/ 53  1.028  44/ 52  1.038  31/ 53  1.019  1.021
//   fwd-compiled, segs    1.036  15/ 17  1.081   1/ 18  1.025  14/ 17  1.081   1/ 18  1.000  1.000
//   fwd-compiled, tensors 1.022  11/ 17  1.037   1/ 17  1.026  10/ 17  1.037   1/ 17  1.001  1.061
//   syn1                  1.055 236/303  1.092 198/224  1.037 255/260  1.078 235/260  1.107  1.000
//   syn2                  1.025 228/305  1.106 171/210  1.028 240/245  1.035 215/235  1.071  1.000
//   syn3                  1.040 228/282  1.034 194/214  1.028 243/247  1.063 227/245  1.076  1.000
//   syn4                  1.026 244/315  1.090 203/232  1.035 260/266  1.073 239/258  1.060  1.000
//   syn5                  1.052 242/313  1.115 187/211  1.043 257/261  1.072 235/260  1.127  1.000
//   syn6                  1.029 245/316  1.053 186/223  1.032 257/261  1.049 235/260  1.059  1.000
//   syn7                  1.031 231/304  1.097 180/216  1.029 243/248  1.056 224/240  1.108  1.000
//   syn8                  1.012 203/280  1.032 158/199  1.012 199/204  1.063 185/207  1.004  1.000
// The synthetic traces pin about eight times their peak: each large segment comes once with a
// size never seen before, and a 2 GiB idle region is beyond the 1 GiB keep. On the PyTorch
// traces, 1 GiB steps pin less on the allocating thread (21 GiB of 58 on fullstep segments,
// against 55 GiB), at up to 1.08x: `spill.host_pool_step` is the knob. The granule arena
// (tiered mode) holds only granule rounding: none for PyTorch's 2 MiB-multiple segments, which
// are what a driver-level shim sees; tensor-sized blocks are a bound, not a case.
// Tried and dropped: reuse only within 1/32 (the same fragmentation, 5% more pins); regions of
// their own above half a step (up to 1.14 with 256 MiB steps: the 100 MiB segments again) or
// above an eighth (the same fragmentation as a quarter, more pins).
//
// Note [Near the host limit]
// Where the host budget (or the driver) refuses a new region, idle memory the pool keeps serves
// what it can, so that keeping it never makes an allocation fail that it could hold: a large
// block takes any idle region of its own that holds it, however loosely, or room in the steps;
// a shared block finding no room turns an idle region of its own into a step. Steps pinned there
// shrink to what the budget allows, down to the block itself.
//
// Note [Unpinning off the allocating thread]
// cuMemFreeHost waits for the device's work: a program whose stream is held by a host function
// waiting for an allocating thread deadlocks if that thread unpins (the host-mode cells of the
// fault matrix, tests/shim/faults, did, when an earlier design gave idle regions up on demand
// before growing). So an allocation never unpins and never waits for an unpin: frees unpin (on
// the freeing thread, or on the background thread for a free made in stream order); memory a
// pin on the allocating thread pinned but could not make usable (pinned_memory_ops.h) is left
// to the background thread; and while that thread is unpinning (`unpinning_`), an allocation
// that finds no room pins on its own thread instead of waiting for the step it asked for.
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
// background thread to pin one more step. A shared block that finds no free range waits for a pin
// already requested or in flight, and pins a step synchronously only if there is none (the pool
// is truly empty); a block above `own_region_above` pins its own region there, unless an idle one
// fits it (Note [Regions of their own for large blocks]). Room ahead is for shared blocks: only
// their allocations ask for it. Idle release never takes free room below the low-water mark, so
// release and growth cannot chase each other.
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

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/host_budget.h"
#include "tiers/free_space.h"
#include "tiers/pinned_memory_ops.h"

namespace vramspill::tiers {

struct HostPoolOptions {
  uint64_t step_bytes = uint64_t{1} << 30;            // pinned per growth step
  uint64_t low_water_bytes = 0;                       // free room kept ahead; 0 = step_bytes / 2
  uint64_t release_idle_above = uint64_t{2} << 30;    // idle pinned bytes kept; beyond: unpinned
  uint64_t granularity = 4096;                        // Note [Pool granularity]; power of two
  bool grow_in_background = true;                     // false: every pin on the allocating thread
  // Blocks larger than this get a region of their own (Note [Regions of their own for large
  // blocks]); 0 = a quarter of a step; never more than a step.
  uint64_t own_region_above = 0;
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
  uint64_t own_regions_reused = 0;  // large blocks put in an idle region of their own, unpinned
  uint64_t pins_ahead = 0;          // pins by the background thread
  uint64_t waits_for_background_pin = 0;
  uint64_t unpins = 0;
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
  // After a device reset freed pinned memory under the pool (Note [Resetting the device] in
  // hooks/device_reset.h): each region PinnedMemoryOps::gone says is gone leaves the books, and
  // its bytes go back to the host budget without an unpin. Its live blocks are lost: each one's
  // free() still answers its size, once, so that a program freeing it is not refused. Returns how
  // many live blocks the lost regions held.
  uint64_t forget_lost_regions() noexcept;
  // Whether `p` lies inside memory the pool has pinned (a block or free room).
  bool owns(const void* p) const noexcept;
  // The start of the live block that holds `p` (any byte of it); nullopt if none does.
  std::optional<uint64_t> block_start(const void* p) const noexcept;

  // Asks the background thread to pin up to the low-water mark now, e.g. at start-up, so that
  // even the first spill does not wait. Returns at once.
  void warm_up() noexcept;
  // Waits until the background thread has nothing left to do: no pin or release
  // requested or in flight (tests, the replay benchmark).
  void wait_for_background_work() noexcept;
  // Stops pinning ahead for good and waits for a pin or unpin in flight (at process exit, so
  // that the background thread is not inside the driver while the driver tears down).
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
    bool own = false;  // holds one large block, or none; never in free_space_
  };
  // Why a region is pinned: room ahead of need (background thread), room for a shared block
  // that found none, or a large block's own region (both on the allocating thread).
  enum class Growth { kStepAhead, kStepNow, kOwnRegion };

  std::optional<uint64_t> allocate_shared(std::unique_lock<std::mutex>& lock,
                                          uint64_t size) noexcept;
  std::optional<uint64_t> allocate_own_region(std::unique_lock<std::mutex>& lock,
                                              uint64_t size) noexcept;
  // The smallest idle region of its own that holds `size` bytes with at most `slack` to spare;
  // end() if none does.
  std::map<uint64_t, Region>::iterator idle_own_region_locked(uint64_t size,
                                                              uint64_t slack) noexcept;
  // Puts a block of `size` in the idle region of its own `idle`.
  std::optional<uint64_t> reuse_locked(Region& idle, uint64_t size) noexcept;
  // Makes the idle region of its own `idle` room for shared blocks (Note [Near the host limit]).
  bool share_locked(Region& idle) noexcept;
  enum class Take { kTaken, kNoRoom, kFailed };
  Take take_locked(uint64_t bytes, uint64_t& block) noexcept;
  // free() of a block a reset took: its size, once (forget_lost_regions()).
  std::optional<uint64_t> forget_lost_block_locked(uint64_t address) noexcept;
  // Gives the bytes of a block that has left blocks_ back to its region; the region, or null
  // when the range is lost (Note [Failure inside the pool]).
  Region* give_back_locked(uint64_t address, uint64_t size) noexcept;
  void charge_locked(Region& region, uint64_t bytes) noexcept;
  // Pins a region of at least `bytes` (outside the lock) and adds it under the lock, the first
  // `claim` bytes as a live block; returns the region's start, nullopt on failure.
  std::optional<uint64_t> grow(std::unique_lock<std::mutex>& lock, uint64_t bytes, uint64_t claim,
                               Growth growth) noexcept;
  bool start_background_thread_locked() noexcept;
  void request_growth_locked() noexcept;
  void request_idle_release_locked() noexcept;
  // Memory pin() pinned but could not make usable: unpinned off the allocating thread (Note
  // [Unpinning off the allocating thread]), counted against the budget until then.
  void give_back_unusable_locked(std::unique_lock<std::mutex>& lock, void* base, uint64_t bytes,
                                 Growth growth) noexcept;
  // Unpins what give_back_unusable_locked() left, then idle regions beyond release_idle_above.
  void release_idle(std::unique_lock<std::mutex>& lock) noexcept;
  // Takes the idle region `idle` out of the books, for the caller to unpin outside the lock (or,
  // lost in a reset, to give back to the budget);
  // nullopt (and nothing changes) if a shared region is not one free range.
  std::optional<Region> retire_locked(std::map<uint64_t, Region>::iterator idle) noexcept;
  // Unpins a region retire_locked() gave, outside the lock.
  void unpin_unlocked(std::unique_lock<std::mutex>& lock, const Region& retired) noexcept;
  void unpin(const Region& region) noexcept;
  void grower_main() noexcept;
  // One round of the background thread's work, holding the lock: a pin ahead, or unpins.
  void background_step() noexcept;
  // The most a new step may pin: the host budget's room and the pinning limit's
  // (PinnedMemoryOps::room), to the granularity.
  uint64_t room_to_pin() const noexcept;
  static void run_background_step(void* pool) noexcept {
    static_cast<HostPool*>(pool)->background_step();
  }
  // How soon the background thread tries again when the driver may not be asked now.
  static constexpr std::chrono::milliseconds kQuietPoll{2};
  bool on_background_thread() const noexcept {
    return std::this_thread::get_id() == grower_.get_id();
  }
  // Room for shared blocks (regions of their own hold none).
  uint64_t free_room_locked() const noexcept { return free_space_.free_bytes(); }
  std::map<uint64_t, Region>::iterator region_of_locked(uint64_t address) noexcept;
  uint64_t round_up(uint64_t bytes) const noexcept;

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
  int pins_in_flight_ = 0;  // step pins (background or synchronous) running
  bool unpinning_ = false;  // the background thread is unpinning: no allocation waits for it
  bool held_off_ = false;   // its last round was refused (PinnedMemoryOps::when_quiet): ditto
  bool background_pin_failed_ = false;  // no retry ahead of need until memory is freed
  bool stopping_ = false;

  std::map<uint64_t, Region> regions_;             // by usable start
  std::vector<Region> unusable_pins_;              // pinned, unusable, not yet unpinned
  FreeSpace free_space_;
  // Live block start -> bytes; ordered, so block_start() can find the block around an address.
  std::map<uint64_t, uint64_t> blocks_;
  // Live blocks of regions a reset freed, start -> bytes, until each is freed.
  std::unordered_map<uint64_t, uint64_t> lost_blocks_;
  uint64_t pinned_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t idle_bytes_ = 0;
  HostPoolStats counters_;  // the event counts and peaks; the rest is computed in stats()
};

}  // namespace vramspill::tiers
