// Stream-ordered allocation: cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync and the
// cuMemPool* / cuDevice*MemPool family. The model is in core/memory_pool.cpp (Note
// [Stream-ordered pools]), and in core/graph_memory.cpp for capturing streams (Note [Graph
// memory]); this file checks arguments as the driver does.
#include "core/memory_pool.h"

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/graph_memory.h"
#include "core/memory_release.h"
#include "core/submit.h"

using simcuda::Allocation;
using simcuda::DefaultStream;
using simcuda::Device;
using simcuda::Driver;
using simcuda::MemoryPool;

namespace {

bool pools_supported(const Device& device) {
  return device.attributes().supports(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
}

CUresult allocate(CUdeviceptr* dptr, size_t size, MemoryPool* pool, CUstream handle,
                  DefaultStream null_means) {
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  simcuda::Stream* stream = nullptr;
  if (CUresult resolved = simcuda::resolve_stream(handle, null_means, &stream,
                                                  simcuda::StreamScope::kAnyContext);
      resolved != CUDA_SUCCESS)
    return resolved;
  Device& device = pool != nullptr ? simcuda::pool_device(*pool) : *stream->context()->device;
  if (!pools_supported(device)) return CUDA_ERROR_NOT_SUPPORTED;
  if (pool == nullptr) pool = simcuda::current_pool(device);
  if (!simcuda::stream_is_capturing(*stream))
    return simcuda::pool_allocate(*pool, size, *stream, dptr);
  std::shared_ptr<simcuda::GraphAllocation> allocation;
  if (CUresult result = simcuda::new_graph_allocation(*pool, size, stream->context(), &allocation);
      result != CUDA_SUCCESS)
    return result;
  const CUdeviceptr address = allocation->memory.base;
  if (CUresult result = simcuda::capture_memory_alloc(*stream, std::move(allocation));
      result != CUDA_SUCCESS)
    return result;
  *dptr = address;
  return CUDA_SUCCESS;
}

CUresult allocate_from(CUdeviceptr* dptr, size_t size, CUmemoryPool handle, CUstream stream,
                       DefaultStream null_means) {
  MemoryPool* pool = simcuda::pool_from_handle(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate(dptr, size, pool, stream, null_means);
}

// Pool blocks are freed in stream order, graph allocations a launch left allocated at once
// (nothing else can reuse them). Other device memory the driver also accepts: it waits for the
// stream and frees it at once.
CUresult free_async(CUdeviceptr dptr, CUstream handle, DefaultStream null_means) {
  simcuda::Stream* stream = nullptr;
  if (CUresult resolved = simcuda::resolve_stream(handle, null_means, &stream,
                                                  simcuda::StreamScope::kAnyContext);
      resolved != CUDA_SUCCESS)
    return resolved;
  if (simcuda::stream_is_capturing(*stream)) return simcuda::capture_memory_free(*stream, dptr);
  if (simcuda::free_graph_allocation(dptr)) return CUDA_SUCCESS;
  const std::optional<Allocation> found = Driver::instance()->allocations().find_exact(dptr);
  if (!found) return CUDA_ERROR_INVALID_VALUE;
  if (found->pool != nullptr) return simcuda::pool_free_async(*found, *stream);
  if (found->kind != simcuda::MemoryKind::kDevice && found->kind != simcuda::MemoryKind::kManaged)
    return CUDA_ERROR_INVALID_VALUE;
  stream->synchronize();
  return simcuda::release_device_pointer(dptr);
}

CUresult device_with_pools(CUdevice ordinal, Device** out) {
  Device* device = Driver::instance()->device(ordinal);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!pools_supported(*device)) return CUDA_ERROR_NOT_SUPPORTED;
  *out = device;
  return CUDA_SUCCESS;
}

// The 13.0 entry points name a location and an allocation type; simcuda has device pools only.
CUresult device_of_location(const CUmemLocation* location, CUmemAllocationType type, Device** out) {
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  return device_with_pools(location->id, out);
}

// Which pool of a device a query answers: simcuda::default_pool or simcuda::current_pool.
using PoolChoice = MemoryPool* (*)(Device&);

// cuDeviceGet(Default)MemPool.
CUresult pool_of_device(CUmemoryPool* out, CUdevice ordinal, PoolChoice choice) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = nullptr;
  if (CUresult result = device_with_pools(ordinal, &device); result != CUDA_SUCCESS) return result;
  *out = simcuda::pool_handle(choice(*device));
  return CUDA_SUCCESS;
}

// cuMemGet(Default)MemPool.
CUresult pool_of_location(CUmemoryPool* out, const CUmemLocation* location,
                          CUmemAllocationType type, PoolChoice choice) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = nullptr;
  if (CUresult result = device_of_location(location, type, &device); result != CUDA_SUCCESS)
    return result;
  *out = simcuda::pool_handle(choice(*device));
  return CUDA_SUCCESS;
}

CUresult set_pool(Device& device, CUmemoryPool handle) {
  MemoryPool* pool = simcuda::pool_from_handle(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (&simcuda::pool_device(*pool) != &device) return CUDA_ERROR_INVALID_DEVICE;
  simcuda::set_current_pool(device, pool);
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                CUstream hStream) {
  SIMCUDA_ENTER("cuMemAllocAsync");
  return allocate(dptr, bytesize, nullptr, hStream, DefaultStream::kLegacy);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                     CUstream hStream) {
  SIMCUDA_ENTER("cuMemAllocAsync_ptsz");
  return allocate(dptr, bytesize, nullptr, hStream, DefaultStream::kPerThread);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize,
                                                        CUmemoryPool pool, CUstream hStream) {
  SIMCUDA_ENTER("cuMemAllocFromPoolAsync");
  return allocate_from(dptr, bytesize, pool, hStream, DefaultStream::kLegacy);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                             CUmemoryPool pool, CUstream hStream) {
  SIMCUDA_ENTER("cuMemAllocFromPoolAsync_ptsz");
  return allocate_from(dptr, bytesize, pool, hStream, DefaultStream::kPerThread);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  SIMCUDA_ENTER("cuMemFreeAsync");
  return free_async(dptr, hStream, DefaultStream::kLegacy);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  SIMCUDA_ENTER("cuMemFreeAsync_ptsz");
  return free_async(dptr, hStream, DefaultStream::kPerThread);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceGetDefaultMemPool");
  return pool_of_device(pool_out, dev, simcuda::default_pool);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceGetMemPool");
  return pool_of_device(pool, dev, simcuda::current_pool);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  SIMCUDA_ENTER("cuDeviceSetMemPool");
  Device* device = nullptr;
  if (CUresult result = device_with_pools(dev, &device); result != CUDA_SUCCESS) return result;
  return set_pool(*device, pool);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool* pool_out,
                                                       CUmemLocation* location,
                                                       CUmemAllocationType type) {
  SIMCUDA_ENTER("cuMemGetDefaultMemPool");
  return pool_of_location(pool_out, location, type, simcuda::default_pool);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                                CUmemAllocationType type) {
  SIMCUDA_ENTER("cuMemGetMemPool");
  return pool_of_location(pool, location, type, simcuda::current_pool);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                                                CUmemoryPool pool) {
  SIMCUDA_ENTER("cuMemSetMemPool");
  Device* device = nullptr;
  if (CUresult result = device_of_location(location, type, &device); result != CUDA_SUCCESS)
    return result;
  return set_pool(*device, pool);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool,
                                                const CUmemPoolProps* poolProps) {
  SIMCUDA_ENTER("cuMemPoolCreate");
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  // Host-located pools (12.6+) and exportable pools are not modeled.
  if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
  if (poolProps->handleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  Device* device = nullptr;
  if (CUresult result = device_with_pools(poolProps->location.id, &device); result != CUDA_SUCCESS)
    return result;
  *pool = simcuda::pool_handle(simcuda::create_pool(*device, *poolProps));
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  SIMCUDA_ENTER("cuMemPoolDestroy");
  MemoryPool* found = simcuda::pool_from_handle(pool);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::destroy_pool(found);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  SIMCUDA_ENTER("cuMemPoolTrimTo");
  MemoryPool* found = simcuda::pool_from_handle(pool);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  simcuda::pool_trim_to(*found, minBytesToKeep);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                      void* value) {
  SIMCUDA_ENTER("cuMemPoolSetAttribute");
  MemoryPool* found = simcuda::pool_from_handle(pool);
  if (found == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::pool_set_attribute(*found, attr, value);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                      void* value) {
  SIMCUDA_ENTER("cuMemPoolGetAttribute");
  MemoryPool* found = simcuda::pool_from_handle(pool);
  if (found == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::pool_get_attribute(*found, attr, value);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map,
                                                   size_t count) {
  SIMCUDA_ENTER("cuMemPoolSetAccess");
  MemoryPool* found = simcuda::pool_from_handle(pool);
  if (found == nullptr || (map == nullptr && count != 0)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i)
    if (CUresult result = simcuda::pool_set_access(*found, map[i]); result != CUDA_SUCCESS)
      return result;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool,
                                                   CUmemLocation* location) {
  SIMCUDA_ENTER("cuMemPoolGetAccess");
  MemoryPool* found = simcuda::pool_from_handle(memPool);
  if (found == nullptr || flags == nullptr || location == nullptr ||
      location->type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (Driver::instance()->device(location->id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *flags = simcuda::pool_get_access(*found, location->id);
  return CUDA_SUCCESS;
}
