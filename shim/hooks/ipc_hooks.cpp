// CUDA IPC shares device memory between processes; host memory that stands in for device memory
// cannot be shared that way (shim/README.md, "Budgets and honesty"), nor can tiered mode's blocks,
// whose granules move (and legacy IPC never shares VMM memory). cuIpcGetMemHandle of a spilled or
// tiered allocation is refused with the error the driver gives for memory it cannot share, and
// the log says which allocation and why, so the user can keep it on the device.
#include "util/bytes.h"
#include "hooks/hook.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"

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
      vramspill::logging::limited(
          vramspill::LogLevel::kWarn, vramspill::RateKey::kSpilledIpc,
          "cuIpcGetMemHandle({:#x}) refused: that allocation ({}, device {}) is tiered, its "
          "granules move between the device and the host, which CUDA IPC cannot share; raise "
          "[tiered] min_size above its size so it goes to the driver",
          dptr, vramspill::format_bytes(found->bytes), found->device);
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return real(pHandle, dptr);
}
