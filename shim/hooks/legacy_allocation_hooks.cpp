// The 32-bit ABI of CUDA 2.0, which drivers still export under the unversioned names:
// cuMemAlloc(CUdeviceptr_v1*, unsigned int), cuMemAllocPitch with unsigned int sizes and pitch,
// and cuMemFree(CUdeviceptr_v1). Programs built before CUDA 3.2 bind to them, and a lookup at
// version 2000 answers them (hooks/proc_address_hooks.cpp), so they are held to the budget like
// their _v2 successors (hooks/allocation_hooks.cpp): admit, call, settle. The ledger keys each
// allocation by its pointer widened to 64 bits, so cuMemFree_v2 of the same pointer finds it too.
//
// Note [Legacy allocations never spill]
// A spilled allocation's pointer is a managed or host-pool address, which never fits the 32
// bits of a CUdeviceptr_v1. So a legacy request over the budget is CUDA_ERROR_OUT_OF_MEMORY,
// with the refusal logged, whatever [spill] mode says; one the driver refuses for want of
// memory stays refused.
#include <cstdint>

#include "hooks/hook.h"
#include "hooks/unspilled_allocation.h"

using vramspill::core::KeySpace;
using vramspill::core::Route;
using vramspill::hooks::Allocated;
using vramspill::hooks::forget_then_free;
using vramspill::hooks::unspilled_allocation;

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAlloc);
  // The driver's error for a NULL output or a zero size, before any budget.
  if (dptr == nullptr || bytesize == 0) return real(dptr, bytesize);
  return unspilled_allocation(Route::kMemAlloc, bytesize, [&](Allocated& allocated) {
    const CUresult result = real(dptr, bytesize);
    if (result == CUDA_SUCCESS) allocated.key = *dptr;
    return result;
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                                unsigned int WidthInBytes, unsigned int Height,
                                                unsigned int ElementSizeBytes) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocPitch);
  const auto allocate = [&] { return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); };
  // The driver's error for NULL outputs and bad shapes, before any budget.
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
    return allocate();
  // Admitted at the unpadded size, recorded as pitch x height (what was taken), as the _v2 ABI.
  // Both products of 32-bit values fit in 64 bits.
  return unspilled_allocation(
      Route::kMemAllocPitch, uint64_t{WidthInBytes} * Height, [&](Allocated& allocated) {
        const CUresult result = allocate();
        if (result == CUDA_SUCCESS) {
          allocated.key = *dptr;
          allocated.bytes = uint64_t{*pPitch} * Height;
        }
        return result;
      });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFree);
  return forget_then_free(dptr, KeySpace::kPointer, [&] { return real(dptr); });
}
