// cuPointerGetAttribute(s): what simcuda knows about a pointer, truthfully for every kind.
#include <cstring>

#include "core/api.h"
#include "core/context.h"
#include "core/driver.h"

using simcuda::Allocation;
using simcuda::Driver;
using simcuda::MemoryKind;

namespace {

template <typename T>
void store(void* data, T value) {
  std::memcpy(data, &value, sizeof(T));
}

bool is_host(const Allocation& a) {
  return a.kind == MemoryKind::kHostPinned || a.kind == MemoryKind::kHostRegistered;
}

// Writes one attribute of `address` (inside `a`). Returns INVALID_VALUE where the driver has no
// value for this kind of memory (a host pointer for device memory, say).
CUresult describe(const Allocation& a, uint64_t address, CUpointer_attribute attribute, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      store<CUcontext>(data, a.context != nullptr ? a.context->handle() : nullptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      store<unsigned int>(data, is_host(a) ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      store<CUdeviceptr>(data, address);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!is_host(a) && a.kind != MemoryKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
      store<void*>(data, reinterpret_cast<void*>(address));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      store<int>(data, 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      store<unsigned long long>(data, a.buffer_id);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      store<int>(data, a.kind == MemoryKind::kManaged ? 1 : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      store<int>(data, a.device);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      // Only plain cuMemAlloc memory can be shared with cuIpcGetMemHandle.
      store<int>(data, a.kind == MemoryKind::kDevice && a.pool == nullptr ? 1 : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      store<CUdeviceptr>(data, a.base);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      store<size_t>(data, a.size);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      store<int>(data, 1);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      store<unsigned long long>(data, 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      store<int>(data, 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      store<unsigned int>(data, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      store<CUmemoryPool>(data, a.pool);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      store<size_t>(data, a.mapped);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      store<void*>(data, reinterpret_cast<void*>(a.base));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      store<unsigned long long>(data, a.buffer_id);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

std::optional<Allocation> find(CUdeviceptr ptr) {
  return Driver::instance()->allocations().find_containing(ptr);
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                      CUdeviceptr ptr) {
  SIMCUDA_ENTER("cuPointerGetAttribute");
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<Allocation> allocation = find(ptr);
  if (!allocation) return CUDA_ERROR_INVALID_VALUE;  // memory the driver never handed out
  return describe(*allocation, ptr, attribute, data);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                                       CUpointer_attribute* attributes,
                                                       void** data, CUdeviceptr ptr) {
  SIMCUDA_ENTER("cuPointerGetAttributes");
  if (numAttributes == 0 || attributes == nullptr || data == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  const std::optional<Allocation> allocation = find(ptr);
  for (unsigned int i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // Unlike the single query, the batch answers for unknown pointers too: memory type 0
    // (unregistered host memory) and empty values, which is how programs test a pointer.
    if (!allocation || describe(*allocation, ptr, attributes[i], data[i]) != CUDA_SUCCESS) {
      if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        store<int>(data[i], -2);
      else if (attributes[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
               attributes[i] == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES ||
               attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID)
        store<unsigned long long>(data[i], 0);
      else if (attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
               attributes[i] == CU_POINTER_ATTRIBUTE_MAPPING_SIZE ||
               attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
               attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
               attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
               attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
               attributes[i] == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR ||
               attributes[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
        store<uint64_t>(data[i], 0);
      else
        store<unsigned int>(data[i], 0);
    }
  }
  return CUDA_SUCCESS;
}

// Exporting a handle is all simcuda does of CUDA IPC (one process cannot open its own handle,
// and simcuda has no second process to share with): enough for programs, and the shim, to learn
// which memory can be shared. Only the base of plain cuMemAlloc memory can; anything else
// (managed, pinned host, pool blocks, VMM mappings, interior pointers) is CUDA_ERROR_INVALID_VALUE.
SIMCUDA_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  SIMCUDA_ENTER("cuIpcGetMemHandle");
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<Allocation> allocation =
      Driver::instance()->allocations().find_exact(dptr);
  if (!allocation || allocation->kind != MemoryKind::kDevice || allocation->pool != nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  CUipcMemHandle handle{};
  std::memcpy(handle.reserved, &allocation->buffer_id, sizeof allocation->buffer_id);
  *pHandle = handle;
  return CUDA_SUCCESS;
}
