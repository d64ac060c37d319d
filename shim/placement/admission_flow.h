// The flow every allocation and free shares, once a hook has entered the shim and knows the
// device: admit against the budget, call the driver, settle the ledger (Note [Reservation
// protocol] in core/ledger.h), and spill what does not fit (Note [The spill chain] in
// placement/spill_placement.h). The driver's calls are the hooks' function objects; tiered mode
// is reached through TieredSeam (hooks/tiered_allocation.h in the shim), so unit tests drive the
// whole flow with fakes (tests/shim/placement/admission_flow_test.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "config/config.h"
#include "core/ledger.h"
#include "placement/pool_books.h"
#include "placement/spill_placement.h"
#include "placement/vmm_spill.h"

namespace vramspill::placement {

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
  const VmmSpillRequest* vmm = nullptr;
  CUmemGenericAllocationHandle* handle_out = nullptr;
  // Linear allocations tiered mode may take instead (placement/tiered_blocks.h), at `bytes`
  // into `out` (and `pitch` into `pitch_out`).
  bool may_tier = false;

  bool may_spill() const { return out != nullptr || vmm != nullptr; }
};

// Stands for a request the ledger admitted but the driver refused for want of memory.
core::Admission driver_refusal(int device, core::Route route, uint64_t bytes);

// What admission asks of tiered mode's arenas.
class TieredSeam {
 public:
  // Room for `bytes` more under `device`'s budget, made by the arena (Note [Tiered budgets] in
  // placement/tiered_placement.h); whether it was.
  virtual bool make_device_room(int device, uint64_t bytes) noexcept = 0;
  // Frees a tiered block the ledger has forgotten, at once or, with a stream, in stream order.
  virtual CUresult free_block(const core::Allocation& block,
                              std::optional<CUstream> stream) noexcept = 0;

 protected:
  TieredSeam() = default;
  ~TieredSeam() = default;
  TieredSeam(const TieredSeam&) = default;
  TieredSeam& operator=(const TieredSeam&) = default;
};

class AdmissionFlow {
 public:
  // Each reference must outlive the flow (all are the shim state's).
  AdmissionFlow(const SpillConfig& config, core::Ledger& ledger, PoolBooks& pools,
                SpillPlacement& spill, VmmSpill& vmm_spill, TieredSeam& tiered) noexcept
      : config_(config),
        ledger_(ledger),
        pools_(pools),
        spill_(spill),
        vmm_spill_(vmm_spill),
        tiered_(tiered) {}
  AdmissionFlow(const AdmissionFlow&) = delete;
  AdmissionFlow& operator=(const AdmissionFlow&) = delete;

  // Admission, the driver call and its settlement, on a device the ledger knows; a request that
  // does not fit (over the budget, or refused by the driver for want of memory) spills if
  // `spill_target` allows. `allocate(Allocated&)` calls the driver; `after_success` runs between
  // the driver call and on_allocated (pools report their growth there, VMM handles are tracked
  // there).
  template <typename Allocate, typename AfterSuccess>
  CUresult admit_and_allocate(int device, core::Route route, uint64_t bytes,
                              uint64_t pool_free_reserved, const SpillTarget& spill_target,
                              Allocate allocate, AfterSuccess after_success);

  template <typename Allocate>
  CUresult admit_and_allocate(int device, core::Route route, uint64_t bytes,
                              const SpillTarget& spill_target, Allocate allocate) {
    return admit_and_allocate(device, route, bytes, 0, spill_target, allocate,
                              [](const Allocated&) {});
  }

  // A request the device has no room for: spills it to `spill_target` if allowed, otherwise
  // returns CUDA_ERROR_OUT_OF_MEMORY. `admission` is the ledger's refusal, or, admitted, stands
  // for a request the driver itself refused (driver_refusal()).
  CUresult refuse_or_spill(const core::Admission& admission, const SpillTarget& spill_target);

  // Frees: the ledger forgets the allocation before the driver has it back (another thread may
  // get the same key at once) and releases its bytes after (until then the device still holds
  // them). A spilled allocation goes back to its tier instead of `free` (the driver's), and a
  // tiered one to its arena; for a stream-ordered free (cuMemFreeAsync) `stream` says whose work
  // it waits for. A key the ledger does not know goes to `free` alone.
  template <typename Free>
  CUresult forget_then_free(uint64_t key, core::KeySpace space, Free free,
                            std::optional<CUstream> stream = std::nullopt);

  // After the driver's free of a forgotten allocation: its bytes leave the budget, or, if the
  // driver refused, it is live again.
  void settle_free(const core::Allocation& forgotten, CUresult result);

 private:
  const SpillConfig& config_;
  core::Ledger& ledger_;
  PoolBooks& pools_;
  SpillPlacement& spill_;
  VmmSpill& vmm_spill_;
  TieredSeam& tiered_;
};

template <typename Allocate, typename AfterSuccess>
CUresult AdmissionFlow::admit_and_allocate(int device, core::Route route, uint64_t bytes,
                                           uint64_t pool_free_reserved,
                                           const SpillTarget& spill_target, Allocate allocate,
                                           AfterSuccess after_success) {
  // Note [Refreshing pool figures] in placement/pool_books.cpp: before a request is refused for
  // want of room, make sure the room is not taken by memory the pools have already given back.
  constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  if (bytes > ledger_.budget_view(device, kUnknown, kUnknown).free_bytes) pools_.refresh(ledger_);
  core::Admission admission = ledger_.admit(device, route, bytes, pool_free_reserved);
  // Room tiered mode's arena holds is room for this request too (Note [Tiered budgets]).
  if (!admission.admitted && config_.mode == SpillMode::kTiered &&
      tiered_.make_device_room(device, bytes)) {
    admission = ledger_.admit(device, route, bytes, pool_free_reserved);
    if (admission.admitted) ledger_.note_over_budget_served(device);
  }
  if (!admission.admitted) return refuse_or_spill(admission, spill_target);
  Allocated allocated{.key = 0, .bytes = bytes};
  const CUresult result = allocate(allocated);
  if (result != CUDA_SUCCESS) {
    ledger_.cancel(admission);
    // Another process took the memory: under the budget, the request spills all the same.
    if (result == CUDA_ERROR_OUT_OF_MEMORY && spill_target.may_spill())
      return refuse_or_spill(driver_refusal(device, route, bytes), spill_target);
    return result;
  }
  after_success(allocated);
  ledger_.on_allocated(admission, allocated.key, allocated.bytes);
  return result;
}

template <typename Free>
CUresult AdmissionFlow::forget_then_free(uint64_t key, core::KeySpace space, Free free,
                                         std::optional<CUstream> stream) {
  const std::optional<core::Allocation> forgotten = ledger_.forget(key, space);
  CUresult result = CUDA_SUCCESS;
  if (forgotten && core::is_spill_route(forgotten->route))
    result = spill_.free(*forgotten, stream.value_or(nullptr), stream.has_value());
  else if (forgotten && forgotten->route == core::Route::kTiered)
    result = tiered_.free_block(*forgotten, stream);
  else
    result = free();
  if (forgotten) settle_free(*forgotten, result);
  return result;
}

}  // namespace vramspill::placement
