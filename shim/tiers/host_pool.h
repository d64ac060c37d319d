// The pinned host pool: where `host` placement mode puts an overflow allocation (shim/README.md,
// "Placement modes"). Page-locked, device-mapped host memory is pinned in large regions ahead of
// need and suballocated into blocks; a block's address is what the program gets back from
// cuMemAlloc.
//
// Algorithm in brief: regions are pinned `step_bytes` at a time (a request larger than a step gets
// a region of its own, sized for it). Blocks are cut from the regions' free ranges by address-
// ordered best fit and merged back on free (tiers/free_space.h). When free room falls below the
// low-water mark, a background thread pins the next step (Note [Pinning ahead of need]). When
// regions with no live block hold more than `release_idle_above`, they are unpinned and their
// bytes given back to the host budget. The background thread also pins scattered idle regions
// again as one (Note [Consolidating idle regions in the background]). Every pinned byte is
// reserved in a core::HostBudget first.
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
// What the step size costs: PyTorch's 100 MiB segments tile 256 MiB steps badly (two per step,
// 56 MiB left over), so with 256 MiB steps the fullstep segments need 1.14x their live bytes;
// with 1 GiB steps, 1.02x. Hence the 1 GiB default (pinned in about 0.35 s, in the background).
//
// Note [Consolidating idle regions in the background]
// A pinned region is one cuMemHostAlloc, one allocation to the driver (pointer queries answer
// per allocation), so free ranges of different regions never merge and a block never spans two
// regions. Under several streams, 0.7-2 GiB segments and empty_cache() bursts (traces from
// tools/traces/synthetic_events.py), a large block then finds no room while gigabytes sit idle
// in regions too small for it, and the pool grows by the block: 1.2-1.6x the live bytes. Giving
// idle regions up on demand, before the pool grows, reached 1.01-1.06, but it unpinned on the
// allocating thread, and cuMemFreeHost waits for the device's work: a program whose stream is
// held by a host function waiting for that thread deadlocked (host-mode cells of the fault
// matrix, tests/shim/faults). So no unpin may happen on an allocating thread, nor may an
// allocation wait for one. What the pool does instead, ahead of need: once an allocation has
// found no room while memory sat idle (`idle_too_scattered_`: the program's demand does not fit
// its idle regions; a program that never misses, like the fault matrix's, never pays for this),
// whenever idle regions other than the largest hold a step or more, the background thread
// unpins every idle region and pins one region of their size (consolidate_idle()). The unpins
// come first, so the pool never holds both. No allocation waits for it: while the thread is
// unpinning (`unpinning_`), an allocation that finds no room pins on its own thread, as when
// nothing is in flight (Note [Pinning ahead of need]); it waits for the new region's pin as for
// any step. A large block
// then takes its room from the consolidated region by best fit, as from one contiguous range.
// Not in sync mode (grow_in_background = false): that would need an unpin on the allocating
// thread. The cost is pinning time on the background thread, and one wait for a large pin for
// an allocation that comes while it runs.
// Replayed (tests/shim/tiers/pool_replay_bench.cpp, fragmentation = peak pool bytes / peak live
// bytes, no idle release; sync: every pin on the allocating thread, which consolidation leaves
// as it was; before and after: with the background thread, finishing its work between calls
// (HostPool/settled; the peak includes the room pinned ahead), without and with consolidation;
// synN = synthetic_events.py --seed N, syn8 with --streams 2 --burst-every 5):
//                               1 GiB steps           256 MiB steps        first  granule
//                               sync   before after   sync   before after  fit    arena
//   fullstep, segments          1.019  1.019  1.019   1.138  1.138  1.138  1.000  1.000
//   fullstep, tensors           1.038  1.038  1.038   1.043  1.043  1.043  1.019  1.021
//   forward-compiled, segments  1.021  1.081  1.081   1.036  1.036  1.036  1.000  1.000
//   forward-compiled, tensors   1.037  1.037  1.037   1.006  1.022  1.022  1.001  1.061
//   syn1                        1.597  1.597  1.148   1.548  1.548  1.126  1.107  1.000
//   syn2                        1.249  1.276  1.153   1.247  1.247  1.126  1.071  1.000
//   syn3                        1.265  1.207  1.113   1.295  1.295  1.108  1.076  1.000
//   syn4                        1.224  1.224  1.063   1.184  1.184  1.090  1.060  1.000
//   syn5                        1.327  1.327  1.132   1.345  1.345  1.145  1.127  1.000
//   syn6                        1.318  1.318  1.039   1.294  1.294  1.034  1.059  1.000
//   syn7                        1.250  1.250  1.088   1.303  1.303  1.156  1.108  1.000
//   syn8                        1.508  1.508  1.035   1.483  1.483  1.022  1.004  1.000
// Why not 1.05: a consolidated region is one contiguous range, and best fit in it fragments as
// first fit over one range does (up to 1.13 here); what the on-demand version had on top, a
// region of exactly its size for each large block, given up when the block is freed, needs a
// pin of a size known only at the allocation and an unpin before the pool grows, both on the
// allocating thread. Tried and dropped: consolidating to at least the largest request seen
// (1.08-1.29: the idle room pinned ahead outweighs it); exact regions for blocks above a quarter
// of a step, pinned on the allocating thread where it would have pinned a step (1.01-1.13, but
// up to twice the pins on that thread, 182 -> 385 on fullstep tensors at 256 MiB); small blocks
// kept out of ranges larger than a step (no change). With idle release at the shim's default
// (spill.host_pool_keep = 1 GiB, on the freeing or background thread), 256 MiB steps stay at
// 1.01-1.06 on these traces and 1 GiB steps at 1.03-1.12, consolidation or not: the rest is
// room left in partly used steps by blocks of a few hundred MiB.
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
#include <span>
#include <thread>

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
  uint64_t consolidations = 0;  // Note [Consolidating idle regions in the background]
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
  // Waits until the background thread has nothing left to do: no pin, release or consolidation
  // requested or in flight (tests, the replay benchmark).
  void wait_for_background_work() noexcept;
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
  Take take_locked(uint64_t bytes, uint64_t& block) noexcept;
  void charge_locked(Region& region, uint64_t bytes) noexcept;
  // Pins a region of at least `bytes` (outside the lock) and adds it under the lock, the first
  // `claim` bytes as a live block; returns the region's start, nullopt on failure.
  std::optional<uint64_t> grow(std::unique_lock<std::mutex>& lock, uint64_t bytes, uint64_t claim,
                               bool ahead) noexcept;
  bool start_background_thread_locked() noexcept;
  void request_growth_locked() noexcept;
  void request_idle_release_locked() noexcept;
  void request_consolidation_locked() noexcept;
  // Whether idle regions other than the largest hold a step or more (Note [Consolidating idle
  // regions in the background]).
  bool worth_consolidating_locked() const noexcept;
  void release_idle(std::unique_lock<std::mutex>& lock) noexcept;
  // Unpins every idle region and pins one region of their size (Note [Consolidating idle regions
  // in the background]); on the background thread only.
  void consolidate_idle(std::unique_lock<std::mutex>& lock) noexcept;
  // Takes the idle region `idle` out of the books, for the caller to unpin outside the lock;
  // nullopt (and nothing changes) if it is not one free range.
  std::optional<Region> retire_locked(std::map<uint64_t, Region>::iterator idle) noexcept;
  // Unpins regions retire_locked() gave, outside the lock.
  void unpin_unlocked(std::unique_lock<std::mutex>& lock, std::span<const Region> retired) noexcept;
  void unpin(const Region& region) noexcept;
  void grower_main() noexcept;
  uint64_t free_room_locked() const noexcept { return pinned_bytes_ - used_bytes_; }
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
  bool consolidation_requested_ = false;
  bool unpinning_ = false;  // the background thread is unpinning: no allocation waits for it
  // An allocation found no room while memory sat idle: from then on, idle regions are
  // consolidated (Note [Consolidating idle regions in the background]).
  bool idle_too_scattered_ = false;
  bool background_pin_failed_ = false;  // no retry ahead of need until memory is freed
  bool stopping_ = false;

  std::map<uint64_t, Region> regions_;             // by usable start
  FreeSpace free_space_;
  // Live block start -> bytes; ordered, so block_start() can find the block around an address.
  std::map<uint64_t, uint64_t> blocks_;
  uint64_t pinned_bytes_ = 0;
  uint64_t used_bytes_ = 0;
  uint64_t idle_bytes_ = 0;
  uint64_t idle_regions_ = 0;
  HostPoolStats counters_;  // the event counts and peaks; the rest is computed in stats()
};

}  // namespace vramspill::tiers
