// Device linear memory: cuMemAlloc, cuMemAllocPitch, cuMemFree, cuMemGetInfo, address ranges.
#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/host_call_cost.h"
#include "core/memory_release.h"

using simcuda::Allocation;
using simcuda::Context;
using simcuda::Driver;

namespace {

CUresult allocate_linear(CUdeviceptr* dptr, uint64_t bytes) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // cudaMalloc is one of the calls stream capture forbids (it may synchronise the device).
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  Allocation allocation;
  const CUresult result = simcuda::map_new_memory(
      *context->device, {.size = bytes, .kind = simcuda::MemoryKind::kDevice}, allocation);
  if (result != CUDA_SUCCESS) return result;
  allocation.context = context;
  Driver::instance()->allocations().add(allocation);
  *dptr = allocation.base;
  simcuda::charge_linear_allocation();  // Note [Host call costs]
  return CUDA_SUCCESS;
}

// The driver pads each row of a pitched allocation to this many bytes (a texture-friendly
// alignment); programs must use the returned pitch, which is what the test checks.
constexpr uint64_t kPitchAlignment = 512;

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  SIMCUDA_ENTER("cuMemAlloc_v2");
  return allocate_linear(dptr, bytesize);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                   size_t WidthInBytes, size_t Height,
                                                   unsigned int ElementSizeBytes) {
  SIMCUDA_ENTER("cuMemAllocPitch_v2");
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
    return CUDA_ERROR_INVALID_VALUE;
  // A padded pitch x height past 2^64 bytes is a size no device holds: the driver's answer is
  // an error, never the wrapped-around product.
  uint64_t bytes = 0;
  if (WidthInBytes > UINT64_MAX - (kPitchAlignment - 1) ||
      __builtin_mul_overflow(simcuda::round_up(WidthInBytes, kPitchAlignment), Height, &bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t pitch = simcuda::round_up(WidthInBytes, kPitchAlignment);
  const CUresult result = allocate_linear(dptr, bytes);
  if (result == CUDA_SUCCESS) *pPitch = pitch;
  return result;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  SIMCUDA_ENTER("cuMemFree_v2");
  if (dptr == 0) return CUDA_SUCCESS;  // freeing NULL is a no-op, as in the driver
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return simcuda::release_device_pointer(dptr);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  SIMCUDA_ENTER("cuMemGetInfo_v2");
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const simcuda::Device& device = *context->device;
  *total = device.total_bytes();
  *free = device.total_bytes() - device.used_bytes();
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                                        CUdeviceptr dptr) {
  SIMCUDA_ENTER("cuMemGetAddressRange_v2");
  const std::optional<Allocation> allocation =
      Driver::instance()->allocations().find_containing(dptr);
  if (!allocation || dptr - allocation->base >= allocation->size) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = allocation->base;
  if (psize != nullptr) *psize = allocation->size;
  return CUDA_SUCCESS;
}
