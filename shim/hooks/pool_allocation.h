// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync and their per-thread
// forms) held to the device budget through their pool's reserve (Note [Stream-ordered pools in
// the budget] in core/ledger.h). The hooks enter and find the pool and its device; the
// exchange and the flow are placement's (placement/pool_exchange.h, AdmissionFlow::
// allocate_from_pool() in placement/admission_flow.h).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "hooks/admission.h"
#include "hooks/pool_tracking.h"
#include "hooks/stream_ordered_tiered.h"

namespace vramspill::hooks {

// The device a stream-ordered request takes memory of (Note [The device a request charges] in
// hooks/devices.h): the stream's for cuMemAllocAsync (`pool` null), the pool's otherwise, or
// kHostLocatedPool; or the error of the driver's query.
CUresult allocating_device(core::Route route, CUmemoryPool pool, CUstream stream, int& device);

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
  // Note [Stream-ordered requests in the arena] in placement/stream_ordered_blocks.h
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
  const placement::SpillTarget spill_target{.out = dptr,
                                            .bytes = bytesize,
                                            .stream = stream,
                                            .stream_ordered = true,
                                            .exportable_pool = pool_books().exportable(pool)};
  return shim->admission.allocate_from_pool(route, device, pool, bytesize, spill_target, call);
}

}  // namespace vramspill::hooks
