// CUDA IPC shares device memory between processes; host memory that stands in for device memory
// cannot be shared that way (shim/README.md, "Budgets and honesty"), nor can tiered mode's blocks,
// whose granules move (and legacy IPC never shares VMM memory), or whose pages do with the
// prefetch mover (managed memory, which the driver itself refuses to share). cuIpcGetMemHandle of
// a spilled or tiered allocation is refused with the error the driver gives for memory it cannot
// share, and the log says which allocation and why, so the user can keep it on the device: for
// spills as often as the rate limit allows, for tiered blocks once (their remedy is the same for
// every block).
#include <atomic>

#include "util/bytes.h"
#include "hooks/hook.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"

namespace {

// Says once why a tiered block cannot be shared.
void log_tiered_refusal(vramspill::hooks::ShimState& shim, CUdeviceptr dptr,
                        const vramspill::core::Allocation& found) {
  static std::atomic<bool> said{false};
  if (said.exchange(true, std::memory_order_relaxed)) return;
  const bool managed = shim.prefetch.device_bytes(found.key).has_value();
  vramspill::logging::warn(
      "cuIpcGetMemHandle({:#x}) refused: that allocation ({}, device {}) is tiered, {}, which "
      "CUDA IPC cannot share; raise [tiered] min_size above its size so it goes to the driver "
      "(said once)",
      dptr, vramspill::format_bytes(found.bytes), found.device,
      managed ? "managed memory that the prefetch mover moves between the device and the host "
                "(the driver refuses managed memory too)"
              : "its granules move between the device and the host");
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuIpcGetMemHandle);
  const vramspill::hooks::Entry entry;
  if (vramspill::hooks::ShimState* shim = entry.state()) {
    const auto found = shim->ledger.find(dptr);
    if (found && vramspill::core::is_spill_route(found->route)) {
      vramspill::logging::limited(
          vramspill::LogLevel::kWarn, vramspill::RateKey::kSpilledIpc,
          "cuIpcGetMemHandle({:#x}) refused: that allocation ({}, device {}) was spilled to host "
          "memory ({}), which CUDA IPC cannot share; raise [device] budget so it stays on the "
          "device, or [spill] min_size above its size",
          dptr, vramspill::format_bytes(found->bytes), found->device,
          vramspill::core::route_name(found->route));
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (found && found->route == vramspill::core::Route::kTiered) {
      log_tiered_refusal(*shim, dptr, *found);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return real(pHandle, dptr);
}
