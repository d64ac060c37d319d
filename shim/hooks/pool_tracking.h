// Stream-ordered pools in the budget: their reserved bytes count (Note [Stream-ordered pools in
// the budget] in core/ledger.h), read from the driver where a stale figure would show.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>

#include "hooks/shim_state.h"

namespace vramspill::hooks {

// A stream-ordered pool's reserved and handed-out bytes.
struct PoolUsage {
  uint64_t reserved = 0;
  uint64_t used = 0;
};

PoolUsage pool_usage(CUmemoryPool pool);

// The device's current pool (what cuMemAllocAsync draws on); null if the driver has none.
CUmemoryPool current_pool(int device);

// Remembers `pool` (of `device`) for refresh_pools().
void track_pool(int device, CUmemoryPool pool);

// Serialises the shim's exchanges with one pool (Note [Stream-ordered pools in the budget] in
// core/ledger.h): a stream-ordered allocation holds it from reading the pool's figure to settling
// its growth, and refresh_pools() skips a pool whose lock is taken. Pools share a fixed set of
// locks, so unrelated pools may wait for each other briefly.
std::unique_lock<std::mutex> lock_pool(CUmemoryPool pool);

// Re-reads the figures of the pools the shim has seen (Note [Refreshing pool figures]).
void refresh_pools(ShimState& shim);

}  // namespace vramspill::hooks
