#include "hooks/pool_allocation.h"

#include <limits>

#include "driver/real_driver.h"
#include "hooks/pool_tracking.h"
#include "telemetry/log.h"
#include "util/bytes.h"

namespace vramspill::hooks {
namespace {

uint64_t pool_key(CUmemoryPool pool) { return reinterpret_cast<uint64_t>(pool); }

// Frees `block` on `stream` and waits for the stream, so that the free has happened and the pool
// can give the memory back; then trims the pool's unused reserve. A request that made the pool
// grow past the budget leaves nothing behind but the wait. False when the block could not be
// freed: it is still the program's. A step that fails is made once more: the block and the stream
// were good a moment ago, and a pool left grown past the budget is what this exists to prevent.
bool give_back(CUmemoryPool pool, CUdeviceptr block, CUstream stream) {
  const auto free_async = VRAMSPILL_REAL(cuMemFreeAsync);
  const auto synchronize = VRAMSPILL_REAL(cuStreamSynchronize);
  const auto trim = VRAMSPILL_REAL(cuMemPoolTrimTo);
  if (free_async == nullptr || synchronize == nullptr || trim == nullptr) return false;
  const auto twice = [](const auto& step) {
    return step() == CUDA_SUCCESS || step() == CUDA_SUCCESS;
  };
  if (!twice([&] { return free_async(block, stream); })) return false;
  // Trimming before the free has run would release nothing. An error that persists (a fault in
  // earlier work) is the program's to find at its next call.
  if (twice([&] { return synchronize(stream); })) trim(pool, 0);
  return true;
}

}  // namespace

bool make_room_for_pool(ShimState& shim, int device, uint64_t bytes) {
  if (shim.config.spill.mode != SpillMode::kTiered) return false;
  const uint64_t growth = core::pool_growth(bytes);
  return shim.prefetch.make_device_room(device, growth) ||
         shim.tiered.make_device_room(device, growth);
}

CUresult allocating_device(core::Route route, CUmemoryPool pool, CUstream stream, int& device) {
  if (route == core::Route::kMemAllocAsync) return stream_device(stream, device);
  if (const std::optional<int> pool_place = pool_device(pool)) {
    device = *pool_place;
    return CUDA_SUCCESS;
  }
  return current_device(device);
}

PoolExchange::PoolExchange(ShimState& shim, int device, CUmemoryPool pool, uint64_t bytes)
    : shim_(shim), device_(device), pool_(pool), bytes_(bytes) {
  // Note [Refreshing pool figures]; before this pool's lock, which refresh_pools() would try.
  constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  if (bytes_ > shim_.ledger.budget_view(device_, kUnknown, kUnknown).free_bytes)
    refresh_pools(shim_);
  lock_ = lock_pool(pool_);
  track_pool(device_, pool_);
}

core::Admission PoolExchange::admit(core::Route route) {
  const std::optional<PoolUsage> usage = pool_usage(pool_);
  if (!usage) {  // Note [A pool figure the driver does not give] in hooks/pool_tracking.h
    reserved_at_admission_ = shim_.ledger.pool_figure(pool_key(pool_));
    return shim_.ledger.admit(device_, route, bytes_);
  }
  reserved_at_admission_ = usage->reserved;
  // The figure as the driver has it now: the pool may have given memory back at a
  // synchronisation the shim did not see, and no one else reports it while the lock is held.
  shim_.ledger.set_pool_reserved(device_, pool_key(pool_), usage->reserved);
  return shim_.ledger.admit(device_, route, bytes_,
                            usage->reserved > usage->used ? usage->reserved - usage->used : 0);
}

bool PoolExchange::settle(core::Admission& admission, CUdeviceptr block, CUstream stream,
                          bool& retry) {
  retry = false;
  const uint64_t grown = reserved_now(admission.reserved_bytes);
  if (shim_.ledger.settle_pool_growth(admission, pool_key(pool_), grown)) return true;
  bool capturing = false;
  // Waiting for a capturing stream would invalidate the program's graph (graph allocations do
  // not normally grow the pool at all); a block that cannot be freed stays the program's. Either
  // way the growth is taken as it is.
  if ((check_capture(stream, capturing) == CUDA_SUCCESS && capturing) ||
      !give_back(pool_, block, stream)) {
    shim_.ledger.cancel(admission);
    admission.reserved_bytes = 0;
    shim_.ledger.set_pool_reserved(device_, pool_key(pool_), grown);
    return true;
  }
  const uint64_t trimmed = reserved_now(0);
  shim_.ledger.set_pool_reserved(device_, pool_key(pool_), trimmed);
  shim_.ledger.cancel(admission);
  // Trimming gave back more than this request's growth: unused reserve that could not serve the
  // request was what filled the budget, and a second attempt may fit.
  retry = trimmed < reserved_at_admission_;
  logging::debug("{} of {}: its pool grew from {} to {}, past the device budget; the block was "
                 "given back and the pool trimmed to {}",
                 core::route_name(admission.route), format_bytes(admission.requested_bytes),
                 format_bytes(reserved_at_admission_), format_bytes(grown), format_bytes(trimmed));
  return false;
}

uint64_t PoolExchange::reserved_now(uint64_t assumed_growth) const {
  if (const std::optional<PoolUsage> usage = pool_usage(pool_)) return usage->reserved;
  return shim_.ledger.pool_figure(pool_key(pool_)) + assumed_growth;
}

}  // namespace vramspill::hooks
