// The 32-bit device-pointer ABI of CUDA 2.0 that drivers still export under the unversioned
// names: cuMemAlloc, cuMemAllocPitch and cuMemFree with CUdeviceptr_v1 and unsigned int sizes.
//
// Note [Legacy allocations have no 32-bit address]
// A CUdeviceptr_v1 holds 32 bits, and every simulated device address lies in the reserved span
// far above 4 GiB (Note [Two views of device memory] in core/address_space.h). So simcuda can
// place no legacy allocation: after the driver's argument and context checks, cuMemAlloc and
// cuMemAllocPitch answer CUDA_ERROR_OUT_OF_MEMORY, as a driver does whose 32-bit-addressable
// memory is used up (unverified: what a real 64-bit driver answers here has not been compared).
// They never hand out a truncated address, and charge nothing. cuMemFree widens its argument and
// frees as cuMemFree_v2 does: no live allocation starts at a 32-bit address, so any pointer but
// 0 is CUDA_ERROR_INVALID_VALUE.
#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/memory_release.h"

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  SIMCUDA_ENTER("cuMemAlloc");
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return CUDA_ERROR_OUT_OF_MEMORY;  // Note [Legacy allocations have no 32-bit address]
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                                unsigned int WidthInBytes, unsigned int Height,
                                                unsigned int ElementSizeBytes) {
  SIMCUDA_ENTER("cuMemAllocPitch");
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
    return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return CUDA_ERROR_OUT_OF_MEMORY;  // Note [Legacy allocations have no 32-bit address]
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) {
  SIMCUDA_ENTER("cuMemFree");
  if (dptr == 0) return CUDA_SUCCESS;  // freeing NULL is a no-op, as in the driver
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return simcuda::release_device_pointer(dptr);
}
