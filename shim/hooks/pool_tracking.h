// Stream-ordered pools in the budget: their reserved bytes count (Note [Stream-ordered pools in
// the budget] in core/ledger.h), read from the driver where a stale figure would show.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <optional>

#include "hooks/shim_state.h"

namespace vramspill::hooks {

// A stream-ordered pool's reserved and handed-out bytes.
struct PoolUsage {
  uint64_t reserved = 0;
  uint64_t used = 0;
};

// Note [A pool figure the driver does not give]
// A failed cuMemPoolGetAttribute says nothing about the pool, so it is never read as an empty
// one: that would drop the pool's memory from the budget and admit requests past it. A refresh
// keeps the figure it had; an allocation admits without counting on the pool's unused reserve and
// takes its growth to be what it reserved. A destroyed pool also fails the query, which is why
// the shim forgets a pool's figure at cuMemPoolDestroy (pool_destroyed()) rather than at the
// first query that fails.
std::optional<PoolUsage> pool_usage(CUmemoryPool pool);

// The device's current pool (what cuMemAllocAsync draws on), or the driver's error. A failed
// query is asked again as the default pool, which is the current one unless the program set
// another (cuDeviceSetMemPool); when both fail, the request gets the first error (Note [A failed
// device query fails the request] in hooks/devices.h).
CUresult current_pool(int device, CUmemoryPool& pool);

// Remembers `pool` (of `device`, or kHostLocatedPool) for refresh_pools() and pool_device().
void track_pool(int device, CUmemoryPool pool);

// What pool_device() says of a pool whose memory is on the host (CU_MEM_LOCATION_TYPE_HOST or
// HOST_NUMA): its allocations take no device memory.
inline constexpr int kHostLocatedPool = -1;

// The device whose memory `pool` holds (Note [The device a request charges] in hooks/devices.h):
// the location cuMemPoolCreate was given, or the device whose default pool it is; nullopt for a
// pool the shim cannot place (imported from another process, or past the pools it tracks).
std::optional<int> pool_device(CUmemoryPool pool);

// cuMemPoolCreate succeeded with `props`: remembers where the pool's memory is.
void pool_created(CUmemoryPool pool, const CUmemPoolProps& props);

// Whether `pool` is `device`'s default pool or one the program created there with plain
// properties (no exportable handle type, no size cap, no special usage): what tiered mode may
// serve from its arena (Note [Stream-ordered requests in the arena] in
// hooks/stream_ordered_tiered.h).
bool plain_pool(int device, CUmemoryPool pool);

// cuMemPoolDestroy succeeded: the pool's memory no longer counts.
void pool_destroyed(ShimState& shim, CUmemoryPool pool);

// Serialises the shim's exchanges with one pool (Note [Stream-ordered pools in the budget] in
// core/ledger.h): a stream-ordered allocation holds it from reading the pool's figure to settling
// its growth, and refresh_pools() skips a pool whose lock is taken. Pools share a fixed set of
// locks, so unrelated pools may wait for each other briefly.
std::unique_lock<std::mutex> lock_pool(CUmemoryPool pool);

// Re-reads the figures of the pools the shim has seen (Note [Refreshing pool figures]).
void refresh_pools(ShimState& shim);

}  // namespace vramspill::hooks
