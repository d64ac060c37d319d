// Multicast objects, as far as binding memory to them goes (Note [Multicast objects]).
//
// Note [Multicast objects]
// NCCL's NVLink SHARP buffers and PyTorch's symmetric memory bind device memory to a multicast
// object: cuMulticastCreate makes one for a number of devices, cuMulticastAddDevice adds each,
// and cuMulticastBindMem binds a cuMemCreate allocation of a device of the team (cuda.h: "The
// memory allocation must have been created on one of the devices that was added to the
// multicast team"). simcuda keeps the team and the bindings and checks a bind as cuda.h says:
// offsets and size multiples of the minimum granularity, within the object and the allocation,
// and the memory on a device of the team; host-located memory, which no device of a team holds,
// is refused with CUDA_ERROR_INVALID_DEVICE (assumed: cuda.h lists the code, not which case it
// is for). Only devices with CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (0 by default, as a card
// without NVSwitch; SIMCUDA_ATTRS sets it) join a team. Simplifications: both granularities are
// one 2 MiB granule (assumed), the multicast range itself is not simulated (cuMemMap refuses a
// multicast handle as it refuses any handle it does not know, so nothing reads or reduces
// through it), cuMulticastBindAddr takes the memory from the start of the handle mapped at the
// address, and a released object's bindings go with it.
#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "core/api.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/multicast.h"
#include "core/vmm.h"

using simcuda::Driver;
using simcuda::kVmmGranularity;

namespace {

struct Binding {
  CUdevice device = 0;
  uint64_t size = 0;
};

struct MulticastObject {
  unsigned int devices = 0;  // the team's size, as created
  uint64_t size = 0;
  std::set<CUdevice> team;
  std::map<uint64_t, Binding> bindings;  // by offset into the object
};

std::mutex multicast_mutex;
std::map<CUmemGenericAllocationHandle, MulticastObject> objects;  // guarded by multicast_mutex
// Apart from VMM handles' values, so that neither is taken for the other.
CUmemGenericAllocationHandle next_handle = 0x4d43000000000000;  // guarded by multicast_mutex

bool supports_multicast(CUdevice ordinal) {
  const simcuda::Device* device = Driver::instance()->device(ordinal);
  return device != nullptr &&
         device->attributes().supports(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED);
}

bool any_device_supports_multicast() {
  for (int ordinal = 0; Driver::instance()->device(ordinal) != nullptr; ++ordinal)
    if (supports_multicast(ordinal)) return true;
  return false;
}

bool granular(uint64_t bytes) { return bytes % kVmmGranularity == 0; }

}  // namespace

CUresult simcuda::multicast_release(CUmemGenericAllocationHandle handle) {
  const std::lock_guard lock(multicast_mutex);
  return objects.erase(handle) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMulticastGetGranularity(size_t* granularity,
                                                          const CUmulticastObjectProp* prop,
                                                          CUmulticastGranularity_flags option) {
  SIMCUDA_ENTER("cuMulticastGetGranularity");
  if (granularity == nullptr || prop == nullptr ||
      (option != CU_MULTICAST_GRANULARITY_MINIMUM &&
       option != CU_MULTICAST_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  if (!any_device_supports_multicast()) return CUDA_ERROR_NOT_SUPPORTED;
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle,
                                                  const CUmulticastObjectProp* prop) {
  SIMCUDA_ENTER("cuMulticastCreate");
  if (mcHandle == nullptr || prop == nullptr || prop->numDevices == 0 || prop->size == 0 ||
      !granular(prop->size) || prop->flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!any_device_supports_multicast()) return CUDA_ERROR_NOT_SUPPORTED;
  const std::lock_guard lock(multicast_mutex);
  const CUmemGenericAllocationHandle handle = next_handle++;
  MulticastObject& object = objects[handle];
  object.devices = prop->numDevices;
  object.size = prop->size;
  *mcHandle = handle;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle,
                                                     CUdevice dev) {
  SIMCUDA_ENTER("cuMulticastAddDevice");
  if (Driver::instance()->device(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!supports_multicast(dev)) return CUDA_ERROR_NOT_SUPPORTED;
  const std::lock_guard lock(multicast_mutex);
  const auto found = objects.find(mcHandle);
  if (found == objects.end()) return CUDA_ERROR_INVALID_VALUE;
  MulticastObject& object = found->second;
  if (object.team.size() == object.devices && !object.team.contains(dev))
    return CUDA_ERROR_INVALID_VALUE;  // a full team (assumed)
  object.team.insert(dev);
  return CUDA_SUCCESS;
}

namespace {

// cuMulticastBindMem's checks and books, which cuMulticastBindAddr shares.
CUresult bind(CUmemGenericAllocationHandle object_handle, size_t object_offset,
              CUmemGenericAllocationHandle memory_handle, size_t memory_offset, size_t size,
              unsigned long long flags) {
  if (flags != 0 || size == 0 || !granular(object_offset) || !granular(memory_offset) ||
      !granular(size))
    return CUDA_ERROR_INVALID_VALUE;
  CUmemAllocationProp memory{};
  uint64_t memory_size = 0;
  if (simcuda::vmm_properties(memory_handle, &memory, &memory_size) != CUDA_SUCCESS ||
      memory_offset + size > memory_size)
    return CUDA_ERROR_INVALID_VALUE;
  const std::lock_guard lock(multicast_mutex);
  const auto found = objects.find(object_handle);
  if (found == objects.end()) return CUDA_ERROR_INVALID_VALUE;
  MulticastObject& object = found->second;
  if (object_offset + size > object.size) return CUDA_ERROR_INVALID_VALUE;
  if (memory.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !object.team.contains(memory.location.id))
    return CUDA_ERROR_INVALID_DEVICE;
  object.bindings[object_offset] = Binding{.device = memory.location.id, .size = size};
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle,
                                                   size_t mcOffset,
                                                   CUmemGenericAllocationHandle memHandle,
                                                   size_t memOffset, size_t size,
                                                   unsigned long long flags) {
  SIMCUDA_ENTER("cuMulticastBindMem");
  return bind(mcHandle, mcOffset, memHandle, memOffset, size, flags);
}

// The memory mapped at `memptr`, from the start of its handle (a bind at an address inside a
// mapping is checked as one from the handle's start: a simplification of the Note).
SIMCUDA_EXPORT CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle,
                                                    size_t mcOffset, CUdeviceptr memptr,
                                                    size_t size, unsigned long long flags) {
  SIMCUDA_ENTER("cuMulticastBindAddr");
  CUmemGenericAllocationHandle memory = 0;
  if (simcuda::vmm_retain(memptr, &memory) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = bind(mcHandle, mcOffset, memory, 0, size, flags);
  (void)simcuda::vmm_release(memory);  // the reference the lookup took
  return result;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle,
                                                  CUdevice dev, size_t mcOffset, size_t size) {
  SIMCUDA_ENTER("cuMulticastUnbind");
  const std::lock_guard lock(multicast_mutex);
  const auto found = objects.find(mcHandle);
  if (found == objects.end()) return CUDA_ERROR_INVALID_VALUE;
  const auto bound = found->second.bindings.find(mcOffset);
  if (bound == found->second.bindings.end() || bound->second.device != dev ||
      bound->second.size != size)
    return CUDA_ERROR_INVALID_VALUE;
  found->second.bindings.erase(bound);
  return CUDA_SUCCESS;
}
