// Stream-ordered pools in the budget: their reserved bytes count (Note [Stream-ordered pools in
// the budget] in core/ledger.h), read from the driver where a stale figure would show.
#pragma once

#include <cuda.h>

#include <cstdint>

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

// Records the pool's reserved bytes in the ledger and remembers the pool for refresh_pools().
void report_pool(ShimState& shim, int device, CUmemoryPool pool);

// Re-reads the figures of the pools the shim has seen (Note [Refreshing pool figures]).
void refresh_pools(ShimState& shim);

}  // namespace vramspill::hooks
