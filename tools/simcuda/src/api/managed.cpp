// Managed memory: cuMemAllocManaged, cuMemAdvise, cuMemPrefetchAsync, cuMemRangeGetAttribute(s).
// The model is in core/managed.cpp (Note [Managed pages]); this file checks arguments the way the
// driver does and translates the two ABIs of advice and prefetch (a device ordinal with
// CU_DEVICE_CPU before 12.2, a CUmemLocation after).
#include "core/managed.h"

#include <cstring>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/submit.h"

using simcuda::Allocation;
using simcuda::Context;
using simcuda::Driver;
using simcuda::kHostLocation;
using simcuda::kNoLocation;

namespace {

// [address, address + size) must lie inside one managed allocation, as the driver requires.
CUresult check_managed_range(CUdeviceptr address, size_t size) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<Allocation> found =
      Driver::instance()->allocations().find_containing(address);
  if (!found || found->kind != simcuda::MemoryKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
  if (size > found->base + found->mapped - address) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// The legacy ABI: a device ordinal or CU_DEVICE_CPU.
CUresult location_from_ordinal(CUdevice device, int* out) {
  if (device == CU_DEVICE_CPU) {
    *out = kHostLocation;
    return CUDA_SUCCESS;
  }
  if (Driver::instance()->device(device) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *out = device;
  return CUDA_SUCCESS;
}

// The 12.2 ABI. Every host location is one place to simcuda (it models no NUMA nodes).
CUresult location_from_struct(const CUmemLocation& location, int* out) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return location_from_ordinal(location.id < 0 ? CU_DEVICE_INVALID : location.id, out);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      *out = kHostLocation;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (location.id < 0) return CUDA_ERROR_INVALID_VALUE;
      *out = kHostLocation;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

bool concurrent_managed_access(const simcuda::Device& device) {
  return device.attributes().supports(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
}

CUresult advise(CUdeviceptr address, size_t size, CUmem_advise advice, CUresult location_result,
                int location) {
  if (CUresult range = check_managed_range(address, size); range != CUDA_SUCCESS) return range;
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
    return CUDA_ERROR_INVALID_VALUE;
  // The read-mostly advice ignores the location; the others need a valid one.
  const bool uses_location = advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
                             advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
                             advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
  if (uses_location && location_result != CUDA_SUCCESS) return location_result;
  // A device as the preferred location, or as one that accesses the range, must support
  // concurrent managed access (cuMemAdvise's documentation).
  const bool names_a_device =
      (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY) &&
      location != kHostLocation;
  if (names_a_device && !concurrent_managed_access(*Driver::instance()->device(location)))
    return CUDA_ERROR_INVALID_DEVICE;
  simcuda::advise_managed(address, size, advice, uses_location ? location : kNoLocation);
  return CUDA_SUCCESS;
}

CUresult prefetch(CUdeviceptr address, size_t size, CUresult location_result, int location,
                  CUstream handle, simcuda::DefaultStream null_means) {
  if (CUresult range = check_managed_range(address, size); range != CUDA_SUCCESS) return range;
  if (location_result != CUDA_SUCCESS) return location_result;
  simcuda::Stream* stream = nullptr;
  if (CUresult resolved = simcuda::resolve_stream(handle, null_means, &stream);
      resolved != CUDA_SUCCESS)
    return resolved;
  // The stream's device must support concurrent managed access, whatever the destination, and
  // so must a device destination (cuMemPrefetchAsync's documentation).
  if (!concurrent_managed_access(*stream->context()->device) ||
      (location != kHostLocation &&
       !concurrent_managed_access(*Driver::instance()->device(location))))
    return CUDA_ERROR_INVALID_DEVICE;
  // Captured into a graph like any asynchronous work when the stream captures; then each run of
  // the graph asks for it (Note [The last prefetch location] in core/managed.cpp).
  const bool captured = simcuda::stream_is_capturing(*stream);
  const CUresult queued = simcuda::submit_async(*stream, [address, size, location, captured] {
    if (captured) simcuda::note_prefetch_request(address, size, location);
    return simcuda::prefetch_managed(address, size, location);
  });
  if (queued == CUDA_SUCCESS && !captured)
    simcuda::note_prefetch_request(address, size, location);
  return queued;
}

// The two ABIs of cuMemPrefetchAsync: a device ordinal (or CU_DEVICE_CPU), and since 12.2 a
// CUmemLocation with flags (which must be 0).
CUresult prefetch_to_ordinal(CUdeviceptr address, size_t size, CUdevice device, CUstream handle,
                             simcuda::DefaultStream null_means) {
  int location = kNoLocation;
  const CUresult located = location_from_ordinal(device, &location);
  return prefetch(address, size, located, location, handle, null_means);
}

CUresult prefetch_to_location(CUdeviceptr address, size_t size, const CUmemLocation& where,
                              unsigned int flags, CUstream handle,
                              simcuda::DefaultStream null_means) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int location = kNoLocation;
  const CUresult located = location_from_struct(where, &location);
  return prefetch(address, size, located, location, handle, null_means);
}

template <typename T>
CUresult store(void* data, size_t data_size, T value) {
  if (data_size != sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(data, &value, sizeof(T));
  return CUDA_SUCCESS;
}

CUmemLocationType location_type(int location) {
  if (location == kNoLocation) return CU_MEM_LOCATION_TYPE_INVALID;
  return location == kHostLocation ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
}

int location_id(int location) { return location >= 0 ? location : 0; }

CUresult range_attribute(void* data, size_t data_size, CUmem_range_attribute attribute,
                         CUdeviceptr address, size_t size) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult range = check_managed_range(address, size); range != CUDA_SUCCESS) return range;
  const simcuda::ManagedRangeAdvice advice = simcuda::managed_range_advice(address, size);
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      return store<int>(data, data_size, advice.read_mostly ? 1 : 0);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
      return store<int>(data, data_size, advice.preferred);
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
      return store<int>(data, data_size, advice.last_prefetch);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
      return store<CUmemLocationType>(data, data_size, location_type(advice.preferred));
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
      return store<int>(data, data_size, location_id(advice.preferred));
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      return store<CUmemLocationType>(data, data_size, location_type(advice.last_prefetch));
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      return store<int>(data, data_size, location_id(advice.last_prefetch));
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      // Devices with the advice on the whole range, then CU_DEVICE_INVALID in the space left.
      if (data_size == 0 || data_size % sizeof(int) != 0) return CUDA_ERROR_INVALID_VALUE;
      const size_t slots = data_size / sizeof(int);
      size_t used = 0;
      auto* out = static_cast<int*>(data);
      for (int bit = 0; bit < 64 && used < slots; ++bit) {
        if (((advice.accessed_by >> bit) & 1) == 0) continue;
        out[used++] = bit == simcuda::kHostBit ? CU_DEVICE_CPU : bit;
      }
      while (used < slots) out[used++] = CU_DEVICE_INVALID;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                  unsigned int flags) {
  SIMCUDA_ENTER("cuMemAllocManaged");
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!context->device->attributes().supports(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY))
    return CUDA_ERROR_NOT_SUPPORTED;
  // As cudaMalloc, one of the calls a capture in global mode forbids (it may synchronise).
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  return simcuda::allocate_managed(*context, bytesize, flags, dptr);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                            CUdevice device) {
  SIMCUDA_ENTER("cuMemAdvise");
  int location = kNoLocation;
  const CUresult located = location_from_ordinal(device, &location);
  return advise(devPtr, count, advice, located, location);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count,
                                               CUmem_advise advice, CUmemLocation location) {
  SIMCUDA_ENTER("cuMemAdvise_v2");
  int where = kNoLocation;
  CUresult located = location_from_struct(location, &where);
  // cuda.h: the accessed-by advice takes a device or the host; "all other location types are
  // invalid".
  const bool accessed_by =
      advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (accessed_by && location.type != CU_MEM_LOCATION_TYPE_DEVICE &&
      location.type != CU_MEM_LOCATION_TYPE_HOST)
    located = CUDA_ERROR_INVALID_VALUE;
  return advise(devPtr, count, advice, located, where);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count,
                                                   CUdevice dstDevice, CUstream hStream) {
  SIMCUDA_ENTER("cuMemPrefetchAsync");
  return prefetch_to_ordinal(devPtr, count, dstDevice, hStream, simcuda::DefaultStream::kLegacy);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count,
                                                        CUdevice dstDevice, CUstream hStream) {
  SIMCUDA_ENTER("cuMemPrefetchAsync_ptsz");
  return prefetch_to_ordinal(devPtr, count, dstDevice, hStream, simcuda::DefaultStream::kPerThread);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count,
                                                      CUmemLocation location, unsigned int flags,
                                                      CUstream hStream) {
  SIMCUDA_ENTER("cuMemPrefetchAsync_v2");
  return prefetch_to_location(devPtr, count, location, flags, hStream,
                              simcuda::DefaultStream::kLegacy);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                           CUmemLocation location,
                                                           unsigned int flags, CUstream hStream) {
  SIMCUDA_ENTER("cuMemPrefetchAsync_v2_ptsz");
  return prefetch_to_location(devPtr, count, location, flags, hStream,
                              simcuda::DefaultStream::kPerThread);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemRangeGetAttribute(void* data, size_t dataSize,
                                                       CUmem_range_attribute attribute,
                                                       CUdeviceptr devPtr, size_t count) {
  SIMCUDA_ENTER("cuMemRangeGetAttribute");
  return range_attribute(data, dataSize, attribute, devPtr, count);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemRangeGetAttributes(void** data, size_t* dataSizes,
                                                        CUmem_range_attribute* attributes,
                                                        size_t numAttributes, CUdeviceptr devPtr,
                                                        size_t count) {
  SIMCUDA_ENTER("cuMemRangeGetAttributes");
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numAttributes; ++i) {
    if (CUresult result = range_attribute(data[i], dataSizes[i], attributes[i], devPtr, count);
        result != CUDA_SUCCESS)
      return result;
  }
  return CUDA_SUCCESS;
}
