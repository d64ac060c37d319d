// The flow every allocation and free shares, once a hook has entered the shim and knows the
// device: admit against the budget, call the driver, settle the ledger (Note [Reservation
// protocol] in core/ledger.h), and spill what does not fit (Note [The spill chain] in
// placement/spill_placement.h). The driver's calls are the hooks' function objects; tiered mode
// is reached through TieredSeam (hooks/tiered_allocation.h in the shim), so unit tests drive the
// whole flow with fakes (tests/shim/placement/admission_flow_test.cpp).
//
// Note [Stream-ordered requests in tiered mode]
// A request its pool cannot serve from its reserve needs the pool to grow, and in tiered mode the
// arena's device granules hold every byte of the budget that nothing else took (Note [Tiered
// budgets] in placement/tiered_placement.h). The request used to be refused by the ledger before
// the driver's call and spilled; the program's cuMemFreeAsync freed the spill, and the next
// step's request found the budget as full as before: the pool never grew, and every step spilled
// its stream-ordered buffers again (PyTorch's cudaMallocAsync backend on an H200: 1 398 spills,
// 830 ms a step against 6.7 ms with cuMemAlloc). So a request that does not fit asks the device's
// arena for room first, as a cuMemAlloc that tiered mode does not take does (TieredSeam::
// make_device_room, which is TieredPlacement::make_device_room: the arena's pooled device
// granules back to the driver, then evictions the policy chooses, inside the remap window and
// none while a capture is in progress), for the whole chunk the pool grows by, and is admitted
// again; only if no room can be made does
// it spill. A pool that grew past its reservation anyway (a fragmented reserve) is given back and
// trimmed as before, and may get room the same way once.
// Once grown, the pool's reserve counts against the budget whether or not it is handed out, so
// the arena cannot take the room back, and a job that frees and allocates the same sizes every
// step is served from the reserve and spills nothing after its first step. That holds while the
// pool keeps its reserve: PyTorch raises RELEASE_THRESHOLD to its maximum; under the default of
// 0 the driver gives wholly idle chunks back at synchronisations, and the room is the arena's
// again until the pool next grows (moves again, but no spill). tests/shim/tiered/
// stream_ordered_workload.cpp is such a job: its modeled steps take 0.07 of the same job's with
// cuMemAlloc in tiered mode, which maps each block's granules at every allocation.
// Only tiered blocks can be evicted, so this does nothing for a job whose memory is all
// stream-ordered (PyTorch with backend:cudaMallocAsync alone): there the pool holds the budget
// and requests past it still spill. Hence the other design, which serves most stream-ordered
// requests before they reach this path: each a tiered block of the arena, kept at its
// cuMemFreeAsync for the next request of its size (Note [Stream-ordered requests in the arena] in
// placement/stream_ordered_blocks.h). What stays here: requests from pools with exportable handles or
// on the host, below [tiered] min_size, on a captured stream, and all of them with [tiered]
// stream_ordered = "pool" (AdmissionFlow::allocate_from_pool()).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "config/config.h"
#include "core/ledger.h"
#include "placement/pool_books.h"
#include "placement/pool_exchange.h"
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
  // From a pool whose memory other processes may import (an exportable handle type): never
  // spilled, as memory bound for another process never is (cuMemPoolExportPointer would refuse
  // the spill, or the importer would not get it), but refused like any request over the budget.
  bool exportable_pool = false;

  bool may_spill() const { return (out != nullptr && !exportable_pool) || vmm != nullptr; }
};

// Stands for a request the ledger admitted but the driver refused for want of memory.
core::Admission driver_refusal(int device, core::Route route, uint64_t bytes);

// What admission asks of tiered mode's arenas.
class TieredSeam {
 public:
  // Room for `bytes` more under `device`'s budget, made by the arena (Note [Tiered budgets] in
  // placement/tiered_placement.h); whether it was.
  virtual bool make_device_room(int device, uint64_t bytes) noexcept = 0;
  // A tiered block the ledger has forgotten went with a reset of its device (Note [Resetting the
  // device] in hooks/device_reset.h): whether it was the arena's or the mover's to forget.
  virtual bool forget_lost_block(const core::Allocation& block) noexcept = 0;
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
                PoolDriver& pool_driver, SpillPlacement& spill, VmmSpill& vmm_spill,
                TieredSeam& tiered) noexcept
      : config_(config),
        ledger_(ledger),
        pools_(pools),
        pool_driver_(pool_driver),
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
                              const SpillTarget& spill_target, Allocate allocate,
                              AfterSuccess after_success);

  template <typename Allocate>
  CUresult admit_and_allocate(int device, core::Route route, uint64_t bytes,
                              const SpillTarget& spill_target, Allocate allocate) {
    return admit_and_allocate(device, route, bytes, spill_target, allocate,
                              [](const Allocated&) {});
  }

  // A stream-ordered request of `bytes` from `pool` on `device` (Note [Stream-ordered pools in
  // the budget] in core/ledger.h): one PoolExchange, and, where it does not fit, a second one
  // after a pool that grew past the budget was trimmed, and one after tiered mode made room
  // (Note [Stream-ordered requests in tiered mode]), never more than
  // one of each; then it spills to `spill_target` or is refused. `allocate()` is the driver's
  // call, into *spill_target.out.
  template <typename Allocate>
  CUresult allocate_from_pool(core::Route route, int device, CUmemoryPool pool, uint64_t bytes,
                              const SpillTarget& spill_target, Allocate allocate);

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

  // Which context ended: a device's primary context reset (Note [Resetting the device] in
  // hooks/device_reset.h), or a context the program created destroyed (Note [A created context's
  // end] there).
  enum class ContextEnd { kPrimaryReset, kCreatedDestroyed };

  // After the driver ended a context of a device: each of `held`, the ledger's allocations of that
  // device just before, that went with the context is forgotten as a free forgets it, but nothing
  // is asked to free it. A spill went if its tier says so (tiers::SpillTier::forget_if_lost), one
  // of the driver's own if `memory_freed(key)` says the driver no longer knows it, a tiered block
  // always (it stands in for device memory of the reset context) once its mover forgot it. VMM
  // handles and arrays, which outlive contexts, stay. A created context's end takes neither
  // host-pool spills nor tiered blocks: the shim made them in primary contexts, which live on.
  // Returns how many went.
  template <typename MemoryFreed>
  std::size_t forget_what_went(std::span<const core::Allocation> held, ContextEnd ended,
                               MemoryFreed memory_freed);

 private:
  const SpillConfig& config_;
  core::Ledger& ledger_;
  PoolBooks& pools_;
  PoolDriver& pool_driver_;
  SpillPlacement& spill_;
  VmmSpill& vmm_spill_;
  TieredSeam& tiered_;
};

template <typename Allocate, typename AfterSuccess>
CUresult AdmissionFlow::admit_and_allocate(int device, core::Route route, uint64_t bytes,
                                           const SpillTarget& spill_target, Allocate allocate,
                                           AfterSuccess after_success) {
  // Note [Refreshing pool figures] in placement/pool_books.cpp: before a request is refused for
  // want of room, make sure the room is not taken by memory the pools have already given back.
  constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();
  if (bytes > ledger_.budget_view(device, kUnknown, kUnknown).free_bytes) pools_.refresh(ledger_);
  core::Admission admission = ledger_.admit(device, route, bytes);
  // Room tiered mode's arena holds is room for this request too (Note [Tiered budgets]).
  if (!admission.admitted && config_.mode == SpillMode::kTiered &&
      tiered_.make_device_room(device, bytes)) {
    admission = ledger_.admit(device, route, bytes);
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

template <typename Allocate>
CUresult AdmissionFlow::allocate_from_pool(core::Route route, int device, CUmemoryPool pool,
                                           uint64_t bytes, const SpillTarget& spill_target,
                                           Allocate allocate) {
  bool trimmed = false;
  bool room_made = false;
  // Tiered mode's arena holds the budget nothing else took (Note [Tiered budgets]).
  const auto make_room = [&](uint64_t growth) {
    if (room_made || config_.mode != SpillMode::kTiered) return false;
    room_made = tiered_.make_device_room(device, growth);
    return room_made;
  };
  for (;;) {
    PoolExchange exchange(ledger_, pools_, pool_driver_, device, pool, bytes);
    core::Admission admission = exchange.admit(route);
    if (!admission.admitted) {
      exchange.unlock();  // making room takes the placement's lock and the remap window
      if (make_room(exchange.growth())) continue;
      return refuse_or_spill(admission, spill_target);
    }
    const CUresult result = allocate();
    if (result != CUDA_SUCCESS) {
      ledger_.cancel(admission);
      exchange.unlock();
      // Another process took the memory: under the budget, the request spills all the same.
      if (result == CUDA_ERROR_OUT_OF_MEMORY)
        return refuse_or_spill(driver_refusal(device, route, bytes), spill_target);
      return result;
    }
    bool retry = false;
    if (exchange.settle(admission, *spill_target.out, spill_target.stream, retry)) {
      ledger_.on_allocated(admission, *spill_target.out, bytes);
      // Over the budget when first asked, served by the room tiered mode made.
      if (room_made) ledger_.note_over_budget_served(device);
      return CUDA_SUCCESS;
    }
    exchange.unlock();
    *spill_target.out = 0;
    if (retry && !trimmed) {
      trimmed = true;
      continue;
    }
    // The pool grew by more than the chunk reserved for it (its reserve was freed on another
    // stream, or fragmented): room for the chunk may still be made.
    if (make_room(exchange.growth())) continue;
    admission.admitted = false;
    return refuse_or_spill(admission, spill_target);
  }
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

template <typename MemoryFreed>
std::size_t AdmissionFlow::forget_what_went(std::span<const core::Allocation> held,
                                            ContextEnd ended, MemoryFreed memory_freed) {
  std::size_t gone = 0;
  for (const core::Allocation& entry : held) {
    if (entry.space() != core::KeySpace::kPointer) continue;
    const bool spilled = core::is_spill_route(entry.route);
    const bool tiered = entry.route == core::Route::kTiered;
    if (ended == ContextEnd::kCreatedDestroyed &&
        (tiered || entry.route == core::Route::kSpillHost))
      continue;
    if (!spilled && !tiered && !memory_freed(entry.key)) continue;
    const std::optional<core::Allocation> forgotten = ledger_.forget(entry.key);
    if (!forgotten) continue;  // freed since
    // Another allocation that took the key since is not the one judged.
    if (forgotten->route != entry.route || (spilled && !spill_.forget_if_lost(*forgotten)) ||
        (tiered && !tiered_.forget_lost_block(*forgotten))) {
      ledger_.reinstate(*forgotten);
      continue;
    }
    settle_free(*forgotten, CUDA_SUCCESS);
    ++gone;
  }
  return gone;
}

}  // namespace vramspill::placement
