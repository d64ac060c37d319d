// Stream-ordered requests as tiered blocks ([tiered] stream_ordered = "arena", the default in
// tiered mode; Note [Stream-ordered requests in the arena] in placement/stream_ordered_blocks.h):
// the hooks enter here and forward to the shim's StreamOrderedBlocks, whose driver is
// DriverStreamOrder (hooks/driver_stream_order.h).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "core/allocation_table.h"
#include "hooks/shim_state.h"

namespace vramspill::hooks {

// placement::StreamOrderedBlocks::allocate(); the caller has made the device known and found the
// stream not being captured (hooks/pool_allocation.h).
std::optional<CUresult> allocate_stream_ordered_tiered(ShimState& shim, int device,
                                                       CUmemoryPool pool, uint64_t bytes,
                                                       CUstream stream, CUdeviceptr* out) noexcept;

// placement::StreamOrderedBlocks::keep(): whether cuMemFreeAsync of `block` on `stream` (not
// capturing) keeps it for reuse; false when the caller frees it as any tiered block.
bool keep_for_reuse(ShimState& shim, const core::Allocation& block, CUstream stream) noexcept;

// placement::StreamOrderedBlocks::pool_trimmed(), once cuMemPoolTrimTo of `pool` succeeded.
void pool_trimmed(ShimState& shim, CUmemoryPool pool) noexcept;

}  // namespace vramspill::hooks
