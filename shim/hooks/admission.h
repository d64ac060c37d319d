// The hooks' part of every allocation and free: enter the shim (Note [Entering the shim]), find
// the device the request charges, and hand the rest to the admission flow
// (placement/admission_flow.h), which admits, calls the driver through the hook's function
// object, settles the ledger and spills.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "core/ledger.h"
#include "hooks/devices.h"
#include "hooks/pool_tracking.h"
#include "hooks/shim_state.h"
#include "placement/admission_flow.h"

namespace vramspill::hooks {

// The hooks describe their requests in the flow's terms.
using placement::Allocated;
using placement::driver_refusal;
using placement::SpillTarget;

// The whole flow of one allocation hook: enter, then AdmissionFlow::admit_and_allocate() on the
// current device; without shim state, the driver's call alone; without a current device,
// cuCtxGetDevice's error (Note [A failed device query fails the request] in hooks/devices.h).
template <typename Allocate>
CUresult enter_and_allocate(core::Route route, uint64_t bytes, const SpillTarget& spill_target,
                            Allocate allocate) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) {
    Allocated ignored;
    return allocate(ignored);
  }
  int device = 0;
  if (const CUresult result = current_device(device); result != CUDA_SUCCESS) return result;
  if (const CUresult result = know_device(*shim, device); result != CUDA_SUCCESS) return result;
  if (spill_target.may_tier) {
    // A tiered block that does not fit whole goes partly to the host: the pools' figures are
    // read again first, as before a refusal (Note [Refreshing pool figures] in
    // placement/pool_books.cpp), since the driver may have taken their idle memory back.
    if (shim->config.spill.mode == SpillMode::kTiered &&
        shim->ledger.room(device) < spill_target.bytes)
      pool_books().refresh(shim->ledger);
    // Note [Kept blocks give room to every request] in placement/stream_ordered_blocks.h.
    if (const std::optional<CUresult> tiered = shim->stream_ordered_blocks.allocate_plain(
            device, spill_target.bytes, spill_target.out)) {
      if (*tiered == CUDA_SUCCESS && spill_target.pitch_out != nullptr)
        *spill_target.pitch_out = spill_target.pitch;
      return *tiered;
    }
  }
  return shim->admission.admit_and_allocate(device, route, bytes, spill_target, allocate);
}

// The whole flow of one free hook: enter, then AdmissionFlow::forget_then_free(); without shim
// state, the driver's call alone.
template <typename Free>
CUresult forget_then_free(uint64_t key, core::KeySpace space, Free free,
                          std::optional<CUstream> stream = std::nullopt) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return free();
  return shim->admission.forget_then_free(key, space, free, stream);
}

}  // namespace vramspill::hooks
