// Page-locked host memory: allocated (cuMemHostAlloc, cuMemAllocHost) or registered
// (cuMemHostRegister). With unified addressing its device pointer is its host address.
#include <sys/mman.h>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/device.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/memory_release.h"

using simcuda::Allocation;
using simcuda::Context;
using simcuda::Driver;
using simcuda::MemoryKind;

namespace {

constexpr unsigned int kHostAllocFlags =
    CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned int kHostRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE |
                                            CU_MEMHOSTREGISTER_DEVICEMAP |
                                            CU_MEMHOSTREGISTER_IOMEMORY |
                                            CU_MEMHOSTREGISTER_READ_ONLY;

bool is_host_kind(MemoryKind kind) {
  return kind == MemoryKind::kHostPinned || kind == MemoryKind::kHostRegistered;
}

CUresult host_alloc(void** pp, size_t bytesize, unsigned int flags) {
  if (pp == nullptr || bytesize == 0 || (flags & ~kHostAllocFlags) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t mapped = simcuda::round_up(bytesize, simcuda::page_size());
  void* memory = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation allocation{.base = reinterpret_cast<uint64_t>(memory),
                        .size = bytesize,
                        .mapped = mapped,
                        .kind = MemoryKind::kHostPinned,
                        .device = context->device->ordinal(),
                        .host_located = true,
                        .context = context,
                        .flags = flags};
  Driver::instance()->allocations().add(allocation);
  *pp = memory;
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  SIMCUDA_ENTER("cuMemHostAlloc");
  // Pinning and unpinning are potentially unsafe beside a capture (Note [Stream capture]).
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return host_alloc(pp, bytesize, Flags);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  SIMCUDA_ENTER("cuMemAllocHost_v2");
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return host_alloc(pp, bytesize, 0);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemFreeHost(void* p) {
  SIMCUDA_ENTER("cuMemFreeHost");
  Driver& driver = *Driver::instance();
  const uint64_t address = reinterpret_cast<uint64_t>(p);
  const std::optional<Allocation> found = driver.allocations().find_exact(address);
  if (!found || found->kind != MemoryKind::kHostPinned) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  // Work still queued may read or write the buffer: the driver waits for it, and so do we.
  found->context->synchronize();
  if (!driver.allocations().remove(address)) return CUDA_ERROR_INVALID_VALUE;
  simcuda::release_host_memory(*found);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize,
                                                     unsigned int Flags) {
  SIMCUDA_ENTER("cuMemHostRegister_v2");
  if (p == nullptr || bytesize == 0 || (Flags & ~kHostRegisterFlags) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  // cuda.h: read-only registration on a device without the attribute is CUDA_ERROR_NOT_SUPPORTED.
  if ((Flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0 &&
      !context->device->attributes().supports(
          CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED))
    return CUDA_ERROR_NOT_SUPPORTED;
  Driver& driver = *Driver::instance();
  const uint64_t base = reinterpret_cast<uint64_t>(p);
  if (driver.addresses().contains(base)) return CUDA_ERROR_INVALID_VALUE;  // not host memory
  // Overlap with an earlier registration (or page-locked allocation) anywhere in the range is
  // refused, as by the driver.
  const std::optional<Allocation> overlap = driver.allocations().find_overlapping(base, bytesize);
  if (overlap && is_host_kind(overlap->kind)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  driver.allocations().add({.base = base,
                            .size = bytesize,
                            .mapped = bytesize,
                            .kind = MemoryKind::kHostRegistered,
                            .device = context->device->ordinal(),
                            .host_located = true,
                            .context = context,
                            .flags = Flags});
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemHostUnregister(void* p) {
  SIMCUDA_ENTER("cuMemHostUnregister");
  Driver& driver = *Driver::instance();
  const uint64_t address = reinterpret_cast<uint64_t>(p);
  const std::optional<Allocation> found = driver.allocations().find_exact(address);
  if (!found || found->kind != MemoryKind::kHostRegistered)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  found->context->synchronize();
  if (!driver.allocations().remove(address)) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  simcuda::release_host_memory(*found);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p,
                                                             unsigned int Flags) {
  SIMCUDA_ENTER("cuMemHostGetDevicePointer_v2");
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<Allocation> found =
      Driver::instance()->allocations().find_containing(reinterpret_cast<uint64_t>(p));
  if (!found || !is_host_kind(found->kind)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  SIMCUDA_ENTER("cuMemHostGetFlags");
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<Allocation> found =
      Driver::instance()->allocations().find_containing(reinterpret_cast<uint64_t>(p));
  if (!found || found->kind != MemoryKind::kHostPinned) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = found->flags;
  return CUDA_SUCCESS;
}
