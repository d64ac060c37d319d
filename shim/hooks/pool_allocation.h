// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync and their per-thread
// forms) held to the device budget through their pool's reserve (Note [Stream-ordered pools in
// the budget] in core/ledger.h).
//
// Note [Stream-ordered requests in tiered mode]
// A request its pool cannot serve from its reserve needs the pool to grow, and in tiered mode the
// arena's device granules hold every byte of the budget that nothing else took (Note [Tiered
// budgets] in placement/tiered_placement.h). The request used to be refused by the ledger before
// the driver's call and spilled; the program's cuMemFreeAsync freed the spill, and the next
// step's request found the budget as full as before: the pool never grew, and every step spilled
// its stream-ordered buffers again (PyTorch's cudaMallocAsync backend on an H200: 1 398 spills,
// 830 ms a step against 6.7 ms with cuMemAlloc). So a request that does not fit asks the device's
// arena for room first, as a cuMemAlloc that tiered mode does not take does
// (TieredPlacement::make_device_room: the arena's pooled device granules back to the driver, then
// evictions the policy chooses, inside the remap window and none while a capture is in progress),
// for the whole chunk the pool grows by, and is admitted again; only if no room can be made does
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
// hooks/stream_ordered_tiered.h). What stays here: requests from pools with exportable handles or
// on the host, below [tiered] min_size, on a captured stream, and all of them with [tiered]
// stream_ordered = "pool".
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "hooks/admission.h"
#include "hooks/pool_tracking.h"
#include "hooks/stream_ordered_tiered.h"

namespace vramspill::hooks {

// One request against one pool, from reading the pool's figure to settling its growth, with the
// pool's lock held throughout (PoolBooks::lock()).
class PoolExchange {
 public:
  // Refreshes the pools' figures first if a request of `bytes` may not fit, then locks `pool`.
  PoolExchange(ShimState& shim, int device, CUmemoryPool pool, uint64_t bytes);

  // Records the pool's reserve as the driver reports it now, and returns the ledger's admission
  // for the request, counting the pool's unused reserve and its size cap.
  core::Admission admit(core::Route route);

  // What the pool grows by should the request not fit its unused reserve (core::pool_growth()),
  // as admit() last reckoned it.
  uint64_t growth() const { return growth_; }

  // After a successful driver call under `admission`: true once the pool's growth is in the
  // budget. False when it does not fit: the block has been given back (freed on `stream`, which
  // is waited for, and the pool trimmed), the admission cancelled, and `admission.refusal` says
  // why; `retry` is whether trimming freed room worth a second attempt.
  bool settle(core::Admission& admission, CUdeviceptr block, CUstream stream, bool& retry);

  // Ends the exchange (the destructor does too): spills and logs happen without the lock.
  void unlock() { lock_.unlock(); }

 private:
  // The pool's reserve now, or if the driver does not say, the ledger's figure plus `assumed`
  // (Note [A pool figure the driver does not give] in placement/pool_books.h).
  uint64_t reserved_now(uint64_t assumed_growth) const;

  ShimState& shim_;
  int device_;
  CUmemoryPool pool_;
  uint64_t bytes_;
  std::unique_lock<std::mutex> lock_;
  uint64_t reserved_at_admission_ = 0;
  uint64_t growth_ = 0;
};

// The device a stream-ordered request takes memory of (Note [The device a request charges] in
// hooks/devices.h): the stream's for cuMemAllocAsync (`pool` null), the pool's otherwise, or
// kHostLocatedPool; or the error of the driver's query.
CUresult allocating_device(core::Route route, CUmemoryPool pool, CUstream stream, int& device);

// In tiered mode, asks `device`'s arena for room for `growth`, the chunk a pool grows by to serve
// a request (PoolExchange::growth(); Note [Stream-ordered requests in tiered mode]); whether the
// budget now has it. False in every other mode.
bool make_room_for_pool(ShimState& shim, int device, uint64_t growth);

// Note [A captured request is the graph's]
// A stream-ordered request on a stream being captured makes an allocation node of the graph: the
// driver reserves its memory for the graph when the graph is instantiated or first launched, from
// the device's graph memory, not from the pool (README.md, "Stream-ordered pools": not counted
// yet). So it goes to the driver as it is, neither charged nor refused: charging the chunk its
// pool would grow by refused such requests once the budget was full, which failed captures
// (PyTorch's CUDA graphs) for memory they do not take, and nothing may be spilled or moved
// during a capture anyway.

// The shared flow of the stream-ordered allocation hooks: `call` is the driver's allocation into
// `*dptr`; `pool` is null for cuMemAllocAsync (the device's current pool); `stream` is the
// stream to free on and to check for capture (the per-thread stream already resolved).
template <typename Call>
CUresult pool_allocation(core::Route route, CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                         CUstream stream, Call call) {
  if (dptr == nullptr) return call();  // the driver's error, whatever the budget would say
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return call();
  int device = 0;
  if (const CUresult result = allocating_device(route, pool, stream, device);
      result != CUDA_SUCCESS)
    return result;  // Note [A failed device query fails the request] in hooks/devices.h
  if (device == kHostLocatedPool) return call();  // takes no device memory
  if (const CUresult result = know_device(*shim, device); result != CUDA_SUCCESS) return result;
  if (route == core::Route::kMemAllocAsync) {
    if (const CUresult result = current_pool(device, pool); result != CUDA_SUCCESS) return result;
  }
  // Note [Stream-ordered requests in the arena] in hooks/stream_ordered_tiered.h
  // Note [A captured request is the graph's]; a stream the driver cannot answer for goes on as
  // one not captured, and the spill chain gives the driver's error (placement/spill_placement.h).
  bool capturing = false;
  const CUresult captured = check_capture(stream, capturing);
  if (captured == CUDA_SUCCESS && capturing) return call();
  if (captured == CUDA_SUCCESS) {
    if (const std::optional<CUresult> tiered =
            allocate_stream_ordered_tiered(*shim, device, pool, bytesize, stream, dptr))
      return *tiered;
  }
  const SpillTarget spill_target{
      .out = dptr, .bytes = bytesize, .stream = stream, .stream_ordered = true};
  // A second attempt after a first one that grew the pool past the budget and then trimmed it
  // (PoolExchange::settle), and one after tiered mode made room; never more than one of each.
  bool trimmed = false;
  bool room_made = false;
  for (;;) {
    PoolExchange exchange(*shim, device, pool, bytesize);
    core::Admission admission = exchange.admit(route);
    if (!admission.admitted) {
      exchange.unlock();  // making room takes the placement's lock and the remap window
      if (!room_made && make_room_for_pool(*shim, device, exchange.growth())) {
        room_made = true;
        continue;
      }
      return shim->admission.refuse_or_spill(admission, spill_target);
    }
    const CUresult result = call();
    if (result != CUDA_SUCCESS) {
      shim->ledger.cancel(admission);
      exchange.unlock();
      // Another process took the memory: under the budget, the request spills all the same.
      if (result == CUDA_ERROR_OUT_OF_MEMORY)
        return shim->admission.refuse_or_spill(driver_refusal(device, route, bytesize),
                                               spill_target);
      return result;
    }
    bool retry = false;
    if (exchange.settle(admission, *dptr, stream, retry)) {
      shim->ledger.on_allocated(admission, *dptr, bytesize);
      // Over the budget when first asked, served by the room tiered mode made.
      if (room_made) shim->ledger.note_over_budget_served(device);
      return CUDA_SUCCESS;
    }
    exchange.unlock();
    *dptr = 0;
    if (retry && !trimmed) {
      trimmed = true;
      continue;
    }
    // The pool grew by more than the chunk reserved for it (its reserve was freed on another
    // stream, or fragmented): room for the chunk may still be made.
    if (!room_made && make_room_for_pool(*shim, device, exchange.growth())) {
      room_made = true;
      continue;
    }
    admission.admitted = false;
    return shim->admission.refuse_or_spill(admission, spill_target);
  }
}

}  // namespace vramspill::hooks
