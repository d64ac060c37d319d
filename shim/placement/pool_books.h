// The stream-ordered pools the shim has seen: where each one's memory is, whether tiered mode may
// serve it, and its figure in the ledger (Note [Stream-ordered pools in the budget] in
// core/ledger.h). The driver's answers come through PoolQueries (hooks/pool_tracking.h on the
// real driver, fakes in tests/shim/placement/pool_books_test.cpp).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

#include "core/ledger.h"
#include "core/spin_lock.h"

namespace vramspill::placement {

// Note [A pool figure the driver does not give]
// A failed cuMemPoolGetAttribute says nothing about the pool, so it is never read as an empty
// one: that would drop the pool's memory from the budget and admit requests past it. A refresh
// keeps the figure it had; an allocation admits without counting on the pool's unused reserve and,
// when the figure after its call is not given (asked twice: a transient failure costs nothing),
// takes its growth to be what it reserved. (One admitted against the unused reserve reserved
// nothing, and may have grown the pool all the same: a failure that persists there leaves the
// growth uncounted, as fault matrix finding F9 showed for a single failure before the second ask.) A destroyed pool also fails the query, which is why
// the shim forgets a pool's figure at cuMemPoolDestroy (PoolBooks::destroyed()) rather than at
// the first query that fails.
class PoolQueries {
 public:
  // The pool's reserved bytes (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), or nullopt when the driver
  // does not say.
  virtual std::optional<uint64_t> reserved(CUmemoryPool pool) noexcept = 0;
  // `device`'s default pool, or null when the driver does not say.
  virtual CUmemoryPool default_pool(int device) noexcept = 0;
  // How many devices there are; 0 when the driver does not say.
  virtual int device_count() noexcept = 0;

 protected:
  constexpr PoolQueries() = default;
  ~PoolQueries() = default;
  PoolQueries(const PoolQueries&) = default;
  PoolQueries& operator=(const PoolQueries&) = default;
};

// How the ledger names a pool's figure.
inline uint64_t pool_key(CUmemoryPool pool) { return reinterpret_cast<uint64_t>(pool); }

// What PoolBooks::device_of() says of a pool whose memory is on the host (CU_MEM_LOCATION_TYPE_HOST
// or HOST_NUMA): its allocations take no device memory.
inline constexpr int kHostLocatedPool = -1;

// Constant-initialised and never destroyed, like the shim's other process-wide books: a pool the
// program creates in a call that does not enter the shim is still placed.
class PoolBooks {
 public:
  explicit constexpr PoolBooks(PoolQueries& queries) noexcept : queries_(queries) {}
  PoolBooks(const PoolBooks&) = delete;
  PoolBooks& operator=(const PoolBooks&) = delete;

  // The device whose memory `pool` holds (Note [The device a request charges] in
  // hooks/devices.h): the location cuMemPoolCreate was given, or the device whose default pool it
  // is; nullopt for a pool the shim cannot place (imported from another process, or past the
  // pools it tracks).
  std::optional<int> device_of(CUmemoryPool pool) noexcept;

  // cuMemPoolCreate succeeded with `props`: remembers where the pool's memory is.
  void created(CUmemoryPool pool, const CUmemPoolProps& props) noexcept;

  // Whether `pool` is `device`'s default pool or one the program created there with plain
  // properties (pinned memory, not managed; no exportable handle type, no size cap, no special
  // usage): what tiered mode may serve from its arena (Note [Stream-ordered requests in the
  // arena] in placement/stream_ordered_blocks.h).
  bool plain(int device, CUmemoryPool pool) noexcept;

  // The size cap cuMemPoolCreate gave `pool` (CUmemPoolProps::maxSize); 0 for none, and for a
  // pool the books do not know.
  uint64_t size_cap(CUmemoryPool pool) const noexcept;

  // Whether cuMemPoolCreate gave `pool` a handle type another process can import its memory by;
  // false for a pool the books do not know.
  bool exportable(CUmemoryPool pool) const noexcept;

  // cuMemPoolDestroy succeeded: the pool's memory no longer counts, on whichever device it was
  // (a pool past the tracked ones included), and the driver is not asked about it again. What
  // the driver keeps for blocks still outstanding until they are freed is not counted.
  void destroyed(core::Ledger& ledger, CUmemoryPool pool) noexcept;

  // cuMemPoolDestroy of `pool` by `destroy()`, as destroyed() when it succeeds. The pool is marked
  // destroyed, and its lock held, through the driver's call: refresh(), run by any thread, must not
  // ask the driver about a pool that another thread is destroying (simcuda's answer read freed
  // memory, which ASan caught).
  template <typename Destroy>
  CUresult destroy(core::Ledger& ledger, CUmemoryPool pool, Destroy destroy);

  // Remembers `pool` (of `device`, or kHostLocatedPool) for refresh() and device_of().
  void track(int device, CUmemoryPool pool) noexcept;

  // Serialises the shim's exchanges with one pool (Note [Stream-ordered pools in the budget] in
  // core/ledger.h): a stream-ordered allocation holds it from reading the pool's figure to
  // settling its growth, and refresh() skips a pool whose lock is taken. Pools share a fixed set
  // of locks, so unrelated pools may wait for each other briefly.
  std::unique_lock<std::mutex> lock(CUmemoryPool pool) { return std::unique_lock(mutex_of(pool)); }

  // Re-reads the figures of the pools the shim has seen (Note [Refreshing pool figures] in
  // pool_books.cpp).
  void refresh(core::Ledger& ledger) noexcept;

  // How many live pools the books can place; later ones are only refreshed by their own calls.
  //
  // Note [Reusing a destroyed pool's slot]
  // Slots are never emptied (readers stop at the first empty one), but a program that makes and
  // destroys pools as it goes (a pool per model or per request) would use them all up, and its
  // later pools could be neither placed on their device nor refreshed. So once every slot is
  // taken, a new pool takes the slot of a destroyed one. Its fields are set before its handle is
  // published, and a reader that meets the slot meanwhile finds the old handle, which the program
  // no longer passes, or the new one marked destroyed, which refresh() skips for that moment.
  static constexpr std::size_t kTrackedPoolCount = 64;

 private:
  struct TrackedPool {
    std::atomic<CUmemoryPool> pool{nullptr};  // published last, with release
    std::atomic<int> device{0};
    // Made by cuMemPoolCreate on the device with no exportable handle and no cap (plain()).
    std::atomic<bool> plain{false};
    std::atomic<uint64_t> size_cap{0};  // maxSize, 0 for none
    std::atomic<bool> exportable{false};  // made with a handle type other processes import
    // Destroyed, and not seen again since (created, or in an exchange): its handle is not asked
    // about (refresh()).
    std::atomic<bool> destroyed{false};
  };

  std::mutex& mutex_of(CUmemoryPool pool) noexcept;
  // Sets the destroyed mark of `pool`'s slot; what it was before (false when there is none).
  bool mark_destroyed(CUmemoryPool pool, bool destroyed) noexcept;

  PoolQueries& queries_;
  // Slots fill in order and are never emptied: readers stop at the first empty one. A destroyed
  // pool's slot is reused once all are taken (Note [Reusing a destroyed pool's slot]).
  std::array<TrackedPool, kTrackedPoolCount> tracked_{};
  core::SpinLock inserting_;  // serialises inserts only
  // lock()'s locks, picked by the pool handle's bits above its (likely) alignment.
  static constexpr std::size_t kPoolLockCount = 16;
  std::array<std::mutex, kPoolLockCount> locks_{};
};

template <typename Destroy>
CUresult PoolBooks::destroy(core::Ledger& ledger, CUmemoryPool pool, Destroy destroy) {
  if (pool == nullptr) return destroy();
  const std::lock_guard held(mutex_of(pool));
  const bool was_destroyed = mark_destroyed(pool, true);
  const CUresult result = destroy();
  if (result != CUDA_SUCCESS) {
    (void)mark_destroyed(pool, was_destroyed);
    return result;
  }
  ledger.forget_pool(pool_key(pool));
  return result;
}

}  // namespace vramspill::placement
