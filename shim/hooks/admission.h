// The flow every allocation and free hook shares: admit against the budget, call the driver,
// settle the ledger (Note [Reservation protocol] in core/ledger.h).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "core/ledger.h"
#include "hooks/devices.h"
#include "hooks/pool_tracking.h"
#include "hooks/shim_state.h"
#include "hooks/tiered_allocation.h"
#include "telemetry/log.h"

namespace vramspill::hooks {

// What the driver's allocation produced.
struct Allocated {
  uint64_t key = 0;    // what the matching free names: pointer, VMM handle or CUarray
  uint64_t bytes = 0;  // what the driver really took
};


// How a request may spill when it does not fit (Note [What spills] in placement/spill_placement.h):
// `out` is where the spilled pointer goes; null for routes that never spill. cuMemCreate spills a
// handle instead (`vmm`, `handle_out`).
struct SpillTarget {
  CUdeviceptr* out = nullptr;
  uint64_t bytes = 0;  // what the spill takes (for cuMemAllocPitch, pitch x height)
  CUstream stream = nullptr;
  bool stream_ordered = false;
  unsigned int managed_flags = CU_MEM_ATTACH_GLOBAL;
  // cuMemAllocPitch: where the spill's pitch goes, and its value.
  size_t* pitch_out = nullptr;
  size_t pitch = 0;
  // cuMemCreate: the program's request, and where the handle goes should it be made host-located
  // instead (Note [Host-located VMM spills] in placement/vmm_spill.h).
  const placement::VmmSpillRequest* vmm = nullptr;
  CUmemGenericAllocationHandle* handle_out = nullptr;
  // Linear allocations tiered mode may take instead (hooks/tiered_allocation.h), at `bytes`
  // into `out` (and `pitch` into `pitch_out`).
  bool may_tier = false;

  bool may_spill() const { return out != nullptr || vmm != nullptr; }
};

// A request the device has no room for: spills it to `spill_target` if allowed, otherwise
// returns CUDA_ERROR_OUT_OF_MEMORY. `admission` is the ledger's refusal, or, admitted, stands for
// a request the driver itself refused.
CUresult refuse_or_spill(ShimState& shim, const core::Admission& admission,
                         const SpillTarget& spill_target);

// Stands for a request the ledger admitted but the driver refused for want of memory.
core::Admission driver_refusal(int device, core::Route route, uint64_t bytes);

// Admission, the driver call and its settlement; a request that does not fit (over the budget,
// or refused by the driver for want of memory) spills if `spill.out` is set. `allocate(Allocated&)`
// calls the driver; `after_success` runs between the driver call and on_allocated (pools report
// their growth there, VMM handles are tracked there).
template <typename Allocate, typename AfterSuccess>
CUresult admit_and_allocate(ShimState& shim, int device, core::Route route, uint64_t bytes,
                            uint64_t pool_free_reserved, const SpillTarget& spill_target,
                            Allocate allocate, AfterSuccess after_success) {
  if (const CUresult result = know_device(shim, device); result != CUDA_SUCCESS) return result;
  // Note [Refreshing pool figures]: before a request is refused for want of room, make sure
  // the room is not taken by memory the pools have already given back.
  constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  if (bytes > shim.ledger.budget_view(device, kUnknown, kUnknown).free_bytes)
    refresh_pools(shim);
  core::Admission admission = shim.ledger.admit(device, route, bytes, pool_free_reserved);
  // Room tiered mode's arena holds is room for this request too (Note [Tiered budgets]).
  if (!admission.admitted && shim.config.spill.mode == SpillMode::kTiered &&
      (shim.prefetch.make_device_room(device, bytes) ||
       shim.tiered.make_device_room(device, bytes))) {
    admission = shim.ledger.admit(device, route, bytes, pool_free_reserved);
    if (admission.admitted) shim.ledger.note_over_budget_served(device);
  }
  if (!admission.admitted) return refuse_or_spill(shim, admission, spill_target);
  Allocated allocated{.key = 0, .bytes = bytes};
  const CUresult result = allocate(allocated);
  if (result != CUDA_SUCCESS) {
    shim.ledger.cancel(admission);
    // Another process took the memory: under the budget, the request spills all the same.
    if (result == CUDA_ERROR_OUT_OF_MEMORY && spill_target.may_spill())
      return refuse_or_spill(shim, driver_refusal(device, route, bytes), spill_target);
    return result;
  }
  after_success(allocated);
  shim.ledger.on_allocated(admission, allocated.key, allocated.bytes);
  return result;
}

template <typename Allocate>
CUresult admit_and_allocate(ShimState& shim, int device, core::Route route, uint64_t bytes,
                            const SpillTarget& spill_target, Allocate allocate) {
  return admit_and_allocate(shim, device, route, bytes, 0, spill_target, allocate,
                            [](const Allocated&) {});
}

// The whole flow of one allocation hook: enter (Note [Entering the shim]), then
// admit_and_allocate() on the current device; without shim state, the driver's call alone;
// without a current device, cuCtxGetDevice's error (Note [A failed device query fails the
// request] in hooks/devices.h).
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
  if (spill_target.may_tier) {
    if (const std::optional<CUresult> tiered =
            allocate_tiered(*shim, device, spill_target.bytes, spill_target.out)) {
      if (*tiered == CUDA_SUCCESS && spill_target.pitch_out != nullptr)
        *spill_target.pitch_out = spill_target.pitch;
      return *tiered;
    }
  }
  return admit_and_allocate(*shim, device, route, bytes, spill_target, allocate);
}

// After the driver's free of a forgotten allocation: its bytes leave the budget, or, if the
// driver refused, it is live again.
void settle_free(ShimState& shim, const core::Allocation& forgotten, CUresult result);

// Frees: the ledger forgets the allocation before the driver has it back (another thread may
// get the same key at once) and releases its bytes after (until then the device still holds
// them). A spilled allocation goes back to its tier instead of the driver, and a tiered one to
// its arena; for a stream-ordered free (cuMemFreeAsync) `stream` says whose work it waits for.
template <typename Free>
CUresult forget_then_free(uint64_t key, core::KeySpace space, Free free,
                          std::optional<CUstream> stream = std::nullopt) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return free();
  const std::optional<core::Allocation> forgotten = shim->ledger.forget(key, space);
  CUresult result = CUDA_SUCCESS;
  if (forgotten && core::is_spill_route(forgotten->route))
    result = shim->spill.free(*forgotten, stream.value_or(nullptr), stream.has_value());
  else if (forgotten && forgotten->route == core::Route::kTiered)
    result = free_tiered(*shim, *forgotten, stream);
  else
    result = free();
  if (forgotten) settle_free(*shim, *forgotten, result);
  return result;
}

}  // namespace vramspill::hooks
