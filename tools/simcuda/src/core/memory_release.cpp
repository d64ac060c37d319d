#include "core/memory_release.h"

#include <sys/mman.h>

#include "core/context.h"
#include "core/device_memory.h"
#include "core/driver.h"
#include "core/host_call_cost.h"
#include "core/managed.h"
#include "core/memory_pool.h"
#include "core/remap_check.h"
#include "core/vmm.h"

namespace simcuda {

CUresult release_device_pointer(CUdeviceptr address) {
  Driver& driver = *Driver::instance();
  const std::optional<Allocation> found = driver.allocations().find_exact(address);
  if (!found || (found->kind != MemoryKind::kDevice && found->kind != MemoryKind::kManaged))
    return CUDA_ERROR_INVALID_VALUE;
  if (found->pool != nullptr) {
    // A stream-ordered block goes back to its pool (which keeps it registered and mapped) at once:
    // the driver makes no implicit synchronisation for one, and the caller must have made sure
    // that its accesses are over (cuda.h, cuMemFree). Work still pending on it is a violation
    // (Note [Remap protocol] in remap_check.h). Not a synchronisation, so pools keep their memory.
    check_remap("cuMemFree of a stream-ordered block", found->base, found->size);
    return pool_free_now(*found);
  }
  if (found->context != nullptr) found->context->synchronize();
  Device& device = *driver.device(found->device);
  if (!driver.allocations().remove(address)) return CUDA_ERROR_INVALID_VALUE;  // lost a race
  if (found->kind == MemoryKind::kManaged) {
    release_managed(*found);
  } else {
    unmap_memory(*found, found->mapped);
    charge_linear_free();  // Note [Host call costs] in host_call_cost.h
  }
  trim_pools_at_synchronize(device);
  return CUDA_SUCCESS;
}

void release_host_memory(const Allocation& allocation) {
  if (allocation.kind == MemoryKind::kHostPinned)
    munmap(reinterpret_cast<void*>(allocation.base), allocation.mapped);
}

void release_context_memory(Context& context) {
  Driver& driver = *Driver::instance();
  for (const Allocation& allocation : driver.allocations().remove_context(&context)) {
    if (allocation.kind == MemoryKind::kManaged)
      release_managed(allocation);
    else if (allocation.kind == MemoryKind::kDevice)
      unmap_memory(allocation, allocation.mapped);
    else
      release_host_memory(allocation);
  }
  pool_forget_context(context);
  vmm_forget_context(context);
  trim_pools_at_synchronize(*context.device);
}

}  // namespace simcuda
