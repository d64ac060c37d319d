// The budget ledger: how many device bytes each route holds, and whether the next request fits.
//
// One Ledger per process. The hooks ask it before every device allocation (admit), tell it the
// outcome (on_allocated or cancel) and every free (on_freed); cuMemGetInfo answers from it
// (budget_view). It makes no driver calls, so unit tests drive it directly.
//
// Note [Reservation protocol]
// Admission must be race-free against the limit: two threads must never both pass a check that
// only one of them fits. So admit() does not merely compare, it *reserves*: one compare-and-swap
// adds the request to the device's held counter only if the result stays within the limit. The
// bytes stay reserved while the driver works, then exactly one of these settles the reservation:
//   on_allocated(admission, key, bytes)  the driver succeeded; `bytes` is what it really took
//                                        (for cuMemAllocPitch, pitch x height, which may exceed
//                                        the request: the difference is added unconditionally,
//                                        because the memory is already gone)
//   cancel(admission)                    the driver failed; the reservation is given back
// A hook that forgets both leaks budget; one that calls both (or either twice) under-counts, and
// the ledger clamps at zero and counts an internal error rather than wrap around.
// Frees come in two steps around the driver's free. forget() *before* it: once the driver has
// the address back it may hand it to another thread, whose on_allocated must not be undone by our
// late erase. release_forgotten() *after* it: until the driver has returned, the memory is still
// taken, and a reservation admitted against bytes not yet given back could take the device over
// its limit. If the driver's free fails, reinstate() puts the entry back. on_freed() does both
// steps at once, for callers with nothing in between.
// A peak taken while other reservations are in flight includes them: peaks are upper bounds by at
// most the requests in flight at that moment.
//
// Note [Stream-ordered pools in the budget]
// A pool holds device memory it has *reserved* (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), whether or
// not it has handed it out, and keeps it after cuMemFreeAsync up to its release threshold. So the
// budget counts pools by what they reserve, and blocks handed out by kMemAllocAsync /
// kMemAllocFromPoolAsync are tracked per route but never added to the held bytes a second time.
// What a request will cost cannot be known before the driver call: the pool may serve it from its
// unused reserve, or grow by a chunk larger than the request because that reserve is fragmented
// or was freed on another stream. The pool grows inside the driver call, before the shim sees
// it, so the growth must be reserved first, or the device holds more than the budget until the
// shim gives it back, and other requests are admitted into room the growth already took (8
// streams of pool traffic under a 256 MiB budget took 316 MiB on simcuda). A request the unused
// reserve cannot hold is taken to grow the pool by a whole chunk, pool_growth(): 32 MiB, or the
// request rounded up to 2 MiB when larger, as the driver's default pool does (a first request of
// a few bytes reserves 32 MiB; tools/demo/tier_probe.c measures it on a GPU). So a stream-ordered
// allocation is one exchange, serialised per pool by the hooks (hooks/pool_allocation.cpp) so
// that no other report of the same pool falls between its steps:
//   set_pool_reserved(pool, R0)        the pool's figure, read before the call (it may have given
//                                      memory back at a synchronisation the shim did not see)
//   admit(..., pool_free_reserved)     reserves the chunk the pool may grow by, when the request
//                                      is larger than the unused reserve
//   driver call
//   settle_pool_growth(admission, pool, R1)
//                                      the pool's growth R1 - R0 replaces the reservation in one
//                                      step: held bytes are never the reservation *and* the growth
//                                      (which would refuse concurrent requests below the limit),
//                                      and growth beyond the reservation is taken only if it fits.
//                                      When it does not, nothing changes and the hook gives the
//                                      block back, trims the pool, and spills or refuses.
//   on_allocated(admission, ...)       records the block (its bytes are in the pool's figure)
// Other reports of a pool's figure (refresh after frees, before refusals, in cuMemGetInfo) replace
// it as the driver says, without a limit check: they describe memory the pool already holds, and
// it can only have shrunk since a settled allocation. A peak includes the chunk a request grew
// the pool by, which the request may not need whole.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/allocation_table.h"
#include "core/memory_events.h"
#include "core/route.h"
#include "core/spin_lock.h"

namespace vramspill::core {

// Device ordinals the ledger tracks. Larger ordinals are admitted without accounting (and counted
// as internal errors): no CUDA node exposes that many devices to one process today.
inline constexpr int kMaxDevices = 32;
// Live allocations a refusal lists, largest first.
inline constexpr std::size_t kRefusalLargestCount = 5;

// The outcome of admit(), and the token that on_allocated() or cancel() settles.
struct Admission {
  bool admitted = true;
  int device = 0;
  Route route = Route::kMemAlloc;
  uint64_t requested_bytes = 0;
  uint64_t reserved_bytes = 0;      // added to the device's held bytes until settled
  uint64_t pool_free_reserved = 0;  // pool routes: the pool's unused reserve when admitted
  std::string refusal;              // one paragraph for the log, when !admitted
};

// cuMemGetInfo's answer under the budget.
struct MemInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

struct RouteSnapshot {
  uint64_t live_bytes = 0;  // for pool routes: handed out, not reserved
  uint64_t live_count = 0;
  uint64_t allocations = 0;      // recorded since the start
  uint64_t bytes_at_peak = 0;    // live bytes when the device's held bytes last peaked
  uint64_t peak_live_bytes = 0;  // spill routes only: the most live at once
};

struct DeviceSnapshot {
  int device = 0;
  bool configured = false;  // set_device() was called; otherwise the limit is unlimited
  uint64_t total_bytes = 0;
  uint64_t limit_bytes = 0;
  uint64_t held_bytes = 0;  // non-pool routes' live bytes + pools' reserved bytes + reservations
  uint64_t peak_bytes = 0;
  uint64_t pool_reserved_bytes = 0;
  uint64_t pool_reserved_at_peak = 0;
  uint64_t tiered_bytes = 0;  // device granules tiered mode's arena holds (Ledger::take)
  uint64_t tiered_at_peak = 0;
  uint64_t over_budget = 0;         // requests that did not fit (Admission::admitted false)
  uint64_t over_budget_served = 0;  // of those, the ones spilled or given room by evictions
  // The requests that failed with CUDA_ERROR_OUT_OF_MEMORY: the word "refused" means these alone,
  // in the summary, `stat` and the exporter.
  uint64_t refused() const noexcept {
    return over_budget - (over_budget_served < over_budget ? over_budget_served : over_budget);
  }
  std::array<RouteSnapshot, kRouteCount> routes{};
};

// Constant-initialisable (a test holds it to that), so static storage runs no code when the shim
// is loaded. Never destroy it while the process lives: threads may allocate during exit.
// About 64 KiB, most of it per-shard counters.
class Ledger {
 public:
  Ledger() = default;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Who is told of every device set up, allocation recorded, allocation released and request
  // refused from now on; null: nobody. `events` must outlive every later call.
  void set_events(MemoryEvents* events) noexcept {
    events_.store(events, std::memory_order_release);
  }

  // The caller computes `limit_bytes` (config: bytes or a percentage of `total_bytes`, minus the
  // reserve). A device never configured counts allocations but has no limit.
  void set_device(int device, uint64_t total_bytes, uint64_t limit_bytes) noexcept;

  // Reserves room for `bytes` on `device`, or explains why not (Note [Reservation protocol]).
  // For pool routes, `pool_free_reserved` is what the pool has reserved but not handed out, and
  // `pool_room_under_cap` what its size cap lets it grow by (pool_growth()); other routes ignore
  // them (Note [Stream-ordered pools in the budget]).
  [[nodiscard]] Admission admit(int device, Route route, uint64_t bytes,
                                uint64_t pool_free_reserved = 0,
                                uint64_t pool_room_under_cap = kUncappedPool) noexcept;

  // The driver allocated `bytes` under `admission`'s reservation; `key` names the allocation in
  // the route's key space (key_space()). A key that is already live replaces the old entry (its
  // free went by a route the shim did not see; counted in missed_frees()).
  void on_allocated(const Admission& admission, uint64_t key, uint64_t bytes) noexcept;

  // The driver failed: gives back `admission`'s reservation.
  void cancel(const Admission& admission) noexcept;

  // A request over the budget on `device` was served all the same: placed in a spill tier, or
  // admitted once tiered mode made room by evicting (so that the summary, `stat` and the
  // exporter count as refused only what failed).
  void note_over_budget_served(int device) noexcept;

  // Removes an allocation from the table and returns it, its bytes still held; nullopt for a key
  // the ledger never recorded (the hook then just forwards to the driver). Call before the
  // driver's free, then release_forgotten() or reinstate() (Note [Reservation protocol]).
  std::optional<Allocation> forget(uint64_t key, KeySpace space = KeySpace::kPointer) noexcept;
  // The driver has freed a forgotten allocation: its bytes no longer count.
  void release_forgotten(const Allocation& entry) noexcept;
  // The driver refused to free a forgotten allocation: it is live again.
  void reinstate(const Allocation& entry) noexcept;
  // The live allocation named `key`, if the ledger recorded one.
  std::optional<Allocation> find(uint64_t key, KeySpace space = KeySpace::kPointer) const noexcept;
  // forget() and release_forgotten() in one.
  std::optional<Allocation> on_freed(uint64_t key, KeySpace space = KeySpace::kPointer) noexcept;

  // Replaces the ledger's figure for the pool `pool_key` (a CUmemoryPool) on `device`; 0 forgets
  // the pool (cuMemPoolDestroy).
  void set_pool_reserved(int device, uint64_t pool_key, uint64_t reserved_bytes) noexcept;

  // Forgets the pool `pool_key` (cuMemPoolDestroy) on whichever device it was counted.
  void forget_pool(uint64_t pool_key) noexcept;

  // The ledger's figure for the pool `pool_key`: what it was last told (0 for a pool it does not
  // know).
  uint64_t pool_figure(uint64_t pool_key) const noexcept;

  // A stream-ordered allocation admitted as `admission` left its pool `pool_key` reserving
  // `reserved_bytes`: the growth since the pool's recorded figure replaces the reservation (Note
  // [Stream-ordered pools in the budget]) and `admission` no longer reserves anything. False when
  // the growth does not fit under the limit: nothing changes, `admission` still reserves (cancel
  // it) and its `refusal` says why.
  [[nodiscard]] bool settle_pool_growth(Admission& admission, uint64_t pool_key,
                                        uint64_t reserved_bytes) noexcept;

  // Tiered mode's arena takes the device memory it holds in whole granules, live or pooled,
  // whoever they back (Note [Tiered budgets] in placement/tiered_placement.h): take() adds
  // `bytes` to the device's held bytes if they stay within the limit (one compare-and-swap, as
  // admit() does), give() takes them back off. The blocks themselves are recorded as
  // Route::kTiered, whose bytes do not count a second time.
  [[nodiscard]] bool take(int device, uint64_t bytes) noexcept;
  void give(int device, uint64_t bytes) noexcept;
  // Bytes `device` may still take under its limit (its limit when it has none).
  uint64_t room(int device) const noexcept;

  // cuMemGetInfo under the shim: total = min(limit, driver total), free = min(driver free, room
  // left under the limit), never negative. An unconfigured device shows the driver's figures.
  MemInfo budget_view(int device, uint64_t driver_free, uint64_t driver_total) const noexcept;

  DeviceSnapshot snapshot(int device) const noexcept;
  // Devices configured or holding (or having held) memory, ascending.
  std::vector<int> devices() const noexcept;
  // Up to `count` live allocations holding memory of `device`, largest first (spilled ones are
  // not among them).
  std::vector<Allocation> largest(int device, std::size_t count) const noexcept;
  // Every live allocation of `device`, spilled ones included, in no order; empty if the list
  // cannot be made (out of memory, counted as an internal error).
  std::vector<Allocation> all_of(int device) const noexcept;

  // For the exit log, one line, e.g. "device 0: peak 3.2 GiB of 20.0 GiB budget (cuMemAlloc
  // 3.0 GiB, stream-ordered pools 0.2 GiB); routes seen: cuMemAlloc x120, cuMemAllocAsync x8;
  // 1 refused". Devices are separated by " | ".
  std::string summary_line() const noexcept;

  // Times the ledger failed open (allocation failure inside it, a device ordinal out of range, a
  // settled reservation settled again): the shim must never be the reason a job fails.
  uint64_t internal_errors() const noexcept { return internal_errors_.load(kRelaxed); }
  uint64_t missed_frees() const noexcept { return missed_frees_.load(kRelaxed); }

 private:
  // Every counter is a plain number whose only invariant is with itself: the limit check is one
  // compare-and-swap on `held`, so no ordering between variables is needed.
  static constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
  static constexpr std::size_t kShardCount = 16;

  struct alignas(64) DeviceState {
    std::atomic<uint64_t> held{0};
    std::array<std::atomic<uint64_t>, kRouteCount> live{};
    std::atomic<uint64_t> limit{kUnlimited};
    std::atomic<uint64_t> total{0};
    std::atomic<bool> configured{false};
    std::atomic<uint64_t> peak{0};
    std::atomic<uint64_t> pool_reserved{0};
    std::atomic<uint64_t> over_budget{0};
    std::atomic<uint64_t> over_budget_served{0};
    std::array<std::atomic<uint64_t>, kRouteCount> live_at_peak{};
    std::array<std::atomic<uint64_t>, kRouteCount> live_peak{};  // spill routes only
    std::atomic<uint64_t> pool_reserved_at_peak{0};
    std::atomic<uint64_t> tiered{0};
    std::atomic<uint64_t> tiered_at_peak{0};
  };

  // Counted under the shard lock, so they cost no atomic operation on the hot path.
  struct RouteCounts {
    uint64_t allocations = 0;
    uint64_t frees = 0;
  };

  // Note [Allocation table layout]; the shard is picked by the top bits of the key's hash.
  struct alignas(64) Shard {
    mutable SpinLock lock;
    AllocationTable table;
    std::array<std::array<RouteCounts, kRouteCount>, kMaxDevices> counts{};
  };

  struct Pool {
    uint64_t key = 0;  // the CUmemoryPool
    int device = 0;
    uint64_t reserved = 0;
  };

  DeviceState* state(int device) noexcept;
  const DeviceState* state(int device) const noexcept;
  Shard& shard(uint64_t hash) noexcept {
    static_assert(kShardCount == 16, "shard() takes the top four bits of the hash");
    return shards_[hash >> 60];
  }
  const Shard& shard(uint64_t hash) const noexcept { return shards_[hash >> 60]; }
  void note_internal_error() const noexcept { internal_errors_.fetch_add(1, kRelaxed); }
  MemoryEvents* events() const noexcept { return events_.load(std::memory_order_acquire); }
  // Subtracts from `counter`, clamping at zero (and counting an internal error) on under-run.
  void subtract(std::atomic<uint64_t>& counter, uint64_t bytes) noexcept;
  static void raise(std::atomic<uint64_t>& peak, uint64_t value) noexcept;
  void raise_peak(DeviceState& device, uint64_t held) noexcept;
  // Replaces (or adds, or for 0 removes) `pool_key`'s entry and returns the old one (reserved 0
  // when there was none). Caller holds pools_mutex_; may throw std::bad_alloc.
  Pool replace_pool_figure_locked(int device, uint64_t pool_key, uint64_t reserved_bytes);
  // Takes the figure `old` had off its device's counters; pools_mutex_ held.
  void uncount_pool_locked(const Pool& old) noexcept;
  // Undoes an entry's live and held bytes (a free, or a stale entry replaced), and tells the
  // trace it was freed.
  void release(const Allocation& entry) noexcept;
  // The same, untold; false for an entry of a device never recorded.
  bool uncount(const Allocation& entry) noexcept;
  std::string refusal_text(int device, Route route, uint64_t bytes, uint64_t pool_free_reserved,
                           uint64_t needed) const;
  std::string device_summary(const DeviceSnapshot& device) const;

  std::array<DeviceState, kMaxDevices> devices_{};
  std::array<Shard, kShardCount> shards_{};
  mutable std::mutex pools_mutex_;
  // Guarded by pools_mutex_. A process has a few pools (each device's default one, and those
  // frameworks create), so a vector searched linearly; unlike a hash map it needs no dynamic
  // initialisation, which keeps Ledger constexpr-constructible.
  std::vector<Pool> pools_;
  std::atomic<MemoryEvents*> events_{nullptr};
  mutable std::atomic<uint64_t> internal_errors_{0};
  std::atomic<uint64_t> missed_frees_{0};
};

}  // namespace vramspill::core
