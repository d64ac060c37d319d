#include "core/memory_release.h"

#include "core/context.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/managed.h"
#include "core/memory_pool.h"

namespace simcuda {

CUresult release_device_pointer(CUdeviceptr address) {
  Driver& driver = *Driver::instance();
  const std::optional<Allocation> found = driver.allocations().find_exact(address);
  if (!found || (found->kind != MemoryKind::kDevice && found->kind != MemoryKind::kManaged))
    return CUDA_ERROR_INVALID_VALUE;
  if (found->context != nullptr) found->context->synchronize();
  Device& device = *driver.device(found->device);
  if (found->pool != nullptr) {
    // A stream-ordered block goes back to its pool (which keeps it registered and mapped);
    // the device was synchronised, so this is also a point where pools give memory back.
    const CUresult result = pool_free_now(*found);
    trim_pools_at_synchronize(device);
    return result;
  }
  if (!driver.allocations().remove(address)) return CUDA_ERROR_INVALID_VALUE;  // lost a race
  if (found->kind == MemoryKind::kManaged)
    release_managed(*found);
  else
    unmap_memory(*found, found->mapped);
  trim_pools_at_synchronize(device);
  return CUDA_SUCCESS;
}

}  // namespace simcuda
