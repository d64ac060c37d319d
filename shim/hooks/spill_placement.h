// Where an allocation goes when it does not fit on the device ([spill] mode, DESIGN.md section 3):
// into a spill tier, or nowhere (CUDA_ERROR_OUT_OF_MEMORY), with a log line that says which and
// why.
//
// Note [What spills]
// Linear device memory spills: cuMemAlloc, cuMemAllocPitch, and stream-ordered allocations (which
// then exist at once; their cuMemFreeAsync is still ordered in the stream). cuMemAllocManaged
// spills only to managed memory, the one tier that keeps its semantics (prefetch, host access by
// the same pointer). VMM physical memory (cuMemCreate) and arrays do not spill: their memory has
// no host-backed equivalent outside the tiered mode of a later version. Nothing spills that
// could not live on the host:
//   - allocations smaller than [spill] min_size (small buffers tend to be hot);
//   - stream-ordered allocations made while their stream is being captured: a graph would bake
//     in the spilled address, and the graph's own free would never reach the spill tier;
//   - anything once the host limit is reached: OUT_OF_MEMORY, not the kernel's OOM killer.
// Later, cuIpcGetMemHandle of a spilled pointer is refused (hooks/ipc_hooks.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/ledger.h"
#include "hooks/shim_state.h"

namespace vramspill::hooks {

struct SpillRequest {
  int device = 0;
  core::Route route = core::Route::kMemAlloc;  // the route the program called
  uint64_t bytes = 0;
  // Stream-ordered routes: the stream, checked for capture. Null for the others.
  CUstream stream = nullptr;
  bool stream_ordered = false;
  unsigned int managed_flags = CU_MEM_ATTACH_GLOBAL;  // cuMemAllocManaged's own flags
};

// Places `request` in a spill tier and records it in the ledger; on failure returns
// CUDA_ERROR_OUT_OF_MEMORY and logs why. `refusal` is the ledger's explanation of why the device
// had no room (empty when the driver itself ran out of memory).
CUresult spill(ShimState& shim, const SpillRequest& request, const std::string& refusal,
               CUdeviceptr* out) noexcept;

// Whether `stream` is being captured into a graph. The driver's error for a stream it does not
// know (CUDA_ERROR_INVALID_HANDLE, say) is what the program's call gets too.
CUresult check_capture(CUstream stream, bool& capturing);

// Frees a spilled allocation in its tier: at once (after the context's work), or, with a stream,
// in that stream's order.
CUresult free_spilled(ShimState& shim, const core::Allocation& spilled, CUstream stream,
                      bool stream_ordered) noexcept;

}  // namespace vramspill::hooks
