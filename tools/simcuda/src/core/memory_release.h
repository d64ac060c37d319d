// Giving memory back by pointer, or all of a context's at once: the one place that knows which
// module owns each kind.
#pragma once

#include <cuda.h>

#include "core/allocations.h"

namespace simcuda {

// cuMemFree semantics: the device is synchronised first (cudaFree synchronises, and so does the
// driver's cuMemFree), then the allocation starting at `address` is returned to where it came
// from. CUDA_ERROR_INVALID_VALUE for a pointer that is not the start of a live allocation.
CUresult release_device_pointer(CUdeviceptr address);

// cuMemFreeHost and cuMemHostUnregister, after the caller synchronised the allocation's context
// and removed `allocation` from the registry: pinned memory is unmapped, a registered range
// only forgotten (its memory is the program's).
void release_host_memory(const Allocation& allocation);

// cuCtxDestroy, after the caller synchronised `context`. As the driver documents, the memory
// allocated in it goes with it: device (cuMemAlloc, cuMemAllocPitch) and managed memory are
// unmapped and uncharged, pinned host memory is unmapped and registered ranges are unregistered.
// Their pointers are unknown from then on: a later cuMemFree or cuMemFreeHost of one is
// CUDA_ERROR_INVALID_VALUE, as for any pointer that is no live allocation. Stream-ordered pool
// blocks and VMM memory are not associated with a context and stay (pool_forget_context,
// vmm_forget_context); the pools give back what they hold free, as at any synchronisation.
void release_context_memory(Context& context);

}  // namespace simcuda
