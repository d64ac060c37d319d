// Virtual memory management exports. The model is in core/vmm.cpp (Note [VMM model]); this file
// checks arguments and device support the way the driver does, and charges map, set-access and
// unmap their host time (Note [Host call costs] in core/host_call_cost.h).
#include "core/vmm.h"

#include "core/api.h"
#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/multicast.h"
#include "core/remap_check.h"

using simcuda::Device;
using simcuda::Driver;
using simcuda::kVmmGranularity;

namespace {

// The device whose support decides calls that name none: the current context's, else device 0.
Device& calling_device() {
  simcuda::Context* context = simcuda::current_context();
  return context != nullptr ? *context->device : *Driver::instance()->device(0);
}

bool vmm_supported(const Device& device) {
  return device.attributes().supports(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
}

bool is_host(CUmemLocationType type) {
  return type == CU_MEM_LOCATION_TYPE_HOST || type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

// The attribute a host location needs: HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED for the
// NUMA ones, HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED for HOST.
CUdevice_attribute host_vmm_attribute(CUmemLocationType type) {
  return type == CU_MEM_LOCATION_TYPE_HOST
             ? CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
             : CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
}

// Whether the simulated host has NUMA node `id`: node 0, and each node a device names as its
// HOST_NUMA_ID.
bool host_numa_node_exists(int id) {
  if (id == 0) return true;
  Driver& driver = *Driver::instance();
  for (int ordinal = 0; ordinal < driver.device_count(); ++ordinal)
    if (driver.device(ordinal)->attributes().get(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) == id)
      return true;
  return false;
}

// Checks an allocation's properties; `device` gets the ordinal whose VRAM it uses, or -1 for
// host-located memory (which needs host_vmm_attribute()).
CUresult check_properties(const CUmemAllocationProp* prop, int* device) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  Device* owner = nullptr;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    owner = Driver::instance()->device(prop->location.id);
    if (owner == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    if (!vmm_supported(*owner)) return CUDA_ERROR_NOT_SUPPORTED;
    *device = prop->location.id;
  } else if (is_host(prop->location.type)) {
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id < 0)
      return CUDA_ERROR_INVALID_VALUE;
    // As cuda.h says: HOST memory is not IPC capable.
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST &&
        prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
      return CUDA_ERROR_INVALID_VALUE;
    owner = &calling_device();
    if (!vmm_supported(*owner) ||
        !owner->attributes().supports(host_vmm_attribute(prop->location.type)))
      return CUDA_ERROR_NOT_SUPPORTED;
    *device = -1;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Exportable handles: only POSIX file descriptors, where the device says it has them.
  // simcuda accepts the request but implements no export (cuMemExportToShareableHandle).
  if (prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    if (!owner->attributes().supports(
            CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED))
      return CUDA_ERROR_NOT_SUPPORTED;
  } else if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                                    CUdeviceptr addr, unsigned long long flags) {
  SIMCUDA_ENTER("cuMemAddressReserve");
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!vmm_supported(calling_device())) return CUDA_ERROR_NOT_SUPPORTED;
  return simcuda::vmm_reserve(size, alignment, addr, ptr);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIMCUDA_ENTER("cuMemAddressFree");
  return simcuda::vmm_free_reservation(ptr, size);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                            const CUmemAllocationProp* prop,
                                            unsigned long long flags) {
  SIMCUDA_ENTER("cuMemCreate");
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  if (CUresult checked = check_properties(prop, &device); checked != CUDA_SUCCESS) return checked;
  // cuda.h: HOST_NUMA_CURRENT is refused here, and a HOST_NUMA id must be a node of the host.
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
      (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA &&
       !host_numa_node_exists(prop->location.id)))
    return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % kVmmGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::vmm_create(size, *prop, device, handle);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIMCUDA_ENTER("cuMemRelease");
  // A multicast object is released like an allocation handle (Note [Multicast objects]).
  const CUresult released = simcuda::vmm_release(handle);
  return released == CUDA_SUCCESS ? released : simcuda::multicast_release(handle);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                         CUmemGenericAllocationHandle handle,
                                         unsigned long long flags) {
  SIMCUDA_ENTER("cuMemMap");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  simcuda::GranuleCount granules;
  const CUresult result = simcuda::vmm_map(ptr, size, offset, handle, &granules);
  if (result != CUDA_SUCCESS) return result;
  simcuda::check_remap("cuMemMap", ptr, size);
  simcuda::charge_vmm_call(simcuda::host_cost::kMemMap, granules);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIMCUDA_ENTER("cuMemUnmap");
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  simcuda::GranuleCount granules;
  const CUresult result = simcuda::vmm_unmap(ptr, size, &granules);
  if (result != CUDA_SUCCESS) return result;
  simcuda::check_remap("cuMemUnmap", ptr, size);
  simcuda::charge_vmm_call(simcuda::host_cost::kMemUnmap, granules);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                               const CUmemAccessDesc* desc, size_t count) {
  SIMCUDA_ENTER("cuMemSetAccess");
  bool revoked = false;
  simcuda::GranuleCount granules;
  const CUresult result = simcuda::vmm_set_access(ptr, size, desc, count, &revoked, &granules);
  if (result != CUDA_SUCCESS) return result;
  // Granting access cannot break queued work; taking it away makes that work fault.
  if (revoked) simcuda::check_remap("cuMemSetAccess", ptr, size);
  simcuda::charge_vmm_call(simcuda::host_cost::kMemSetAccess, granules);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags,
                                               const CUmemLocation* location, CUdeviceptr ptr) {
  SIMCUDA_ENTER("cuMemGetAccess");
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::vmm_get_access(ptr, *location, flags);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(
    size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option) {
  SIMCUDA_ENTER("cuMemGetAllocationGranularity");
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  if (CUresult checked = check_properties(prop, &device); checked != CUDA_SUCCESS) return checked;
  *granularity = kVmmGranularity;  // minimum and recommended alike, as on current GPUs
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  SIMCUDA_ENTER("cuMemGetAllocationPropertiesFromHandle");
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::vmm_properties(handle, prop);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                            void* addr) {
  SIMCUDA_ENTER("cuMemRetainAllocationHandle");
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::vmm_retain(reinterpret_cast<uint64_t>(addr), handle);
}
