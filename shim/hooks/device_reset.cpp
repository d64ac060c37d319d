#include "hooks/device_reset.h"

#include <algorithm>

#include "driver/freed_memory.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"
#include "util/bytes.h"

namespace vramspill::hooks {

std::vector<core::Allocation> held_before_reset(ShimState& shim, int device) noexcept {
  return shim.ledger.all_of(device);
}

void forget_what_the_reset_freed(ShimState& shim, int device,
                                 const std::vector<core::Allocation>& held) noexcept {
  // The pool and the movers first: a block given back below must not reach a region that is
  // gone, nor wait for a copy or an event that went with the context.
  const uint64_t lost_pool_blocks = shim.host.forget_lost_regions();
  shim.tiered_blocks.forget_context(device);
  const std::size_t gone = shim.admission.forget_reset(held, &driver::memory_freed);
  const uint64_t unpinned = shim.program_pinned.forget_freed(&driver::memory_freed);
  shim.host_budget.release(unpinned);
  logging::info(
      "device {} was reset (cuDevicePrimaryCtxReset): {} of its {} allocations went with its "
      "primary context and left the budget, and {} of the program's page-locked memory",
      device, gone, held.size(), format_bytes(unpinned));
  // Blocks spilled for other devices lived in the pool's memory too, and nothing can bring it
  // back for them.
  const auto own = static_cast<uint64_t>(std::ranges::count_if(
      held, [](const core::Allocation& entry) { return entry.route == core::Route::kSpillHost; }));
  if (lost_pool_blocks > own)
    logging::warn(
        "resetting device {} freed the pinned host pool's memory, which {} blocks spilled for "
        "other devices still used: their contents are gone, and a kernel using them will fault",
        device, lost_pool_blocks - own);
}

}  // namespace vramspill::hooks
