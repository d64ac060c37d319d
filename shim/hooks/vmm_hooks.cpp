// The VMM routes (cuMemCreate, cuMemMap, cuMemUnmap, cuMemRelease, cuMemRetainAllocationHandle):
// device-located physical memory counts against the budget from cuMemCreate until the driver
// frees it, which is at the last cuMemRelease or the last cuMemUnmap, whichever comes later
// (Note [VMM memory lives until its last mapping goes] in core/vmm_tracker.h). Host-located
// physical memory the program asks for takes no device memory and is forwarded untouched. A
// device-located cuMemCreate that does not fit may be made host-located instead, charged to the
// host budget until the driver frees it (Note [Host-located VMM spills] in placement/vmm_spill.h).
#include <cstdint>
#include <optional>
#include <vector>

#include "hooks/admission.h"
#include "hooks/hook.h"

using vramspill::core::Allocation;
using vramspill::core::KeySpace;
using vramspill::core::Route;
using vramspill::hooks::Allocated;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

// After the driver's answer to the call that frees a handle's memory (Note [VMM memory lives until
// its last mapping goes]): a host-located spill gives its host budget back too.
void settle_vmm_free(ShimState& shim, const Allocation& forgotten, CUresult result) {
  shim.admission.settle_free(forgotten, result);
  if (result == CUDA_SUCCESS && forgotten.route == Route::kSpillVmmHost)
    shim.vmm_spill.freed(forgotten);
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                            const CUmemAllocationProp* prop,
                                            unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemCreate);
  const auto create = [&] { return real(handle, size, prop, flags); };
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || prop == nullptr || handle == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return create();
  const vramspill::placement::VmmSpillRequest spill{
      .device = prop->location.id, .bytes = size, .prop = prop, .flags = flags};
  if (const CUresult result = vramspill::hooks::know_device(*shim, prop->location.id);
      result != CUDA_SUCCESS)
    return result;
  return shim->admission.admit_and_allocate(
      prop->location.id, Route::kMemCreate, size, 0,
      vramspill::placement::SpillTarget{.vmm = &spill, .handle_out = handle},
      [&](Allocated& allocated) {
        const CUresult result = create();
        if (result == CUDA_SUCCESS) allocated.key = *handle;
        return result;
      },
      [&](const Allocated& allocated) { shim->vmm.created(allocated.key); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                            void* addr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemRetainAllocationHandle);
  const CUresult result = real(handle, addr);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS)
    shim->vmm.retained(*handle);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                         CUmemGenericAllocationHandle handle,
                                         unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemMap);
  const CUresult result = real(ptr, size, offset, handle, flags);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS)
    shim->vmm.mapped(ptr, size, handle);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemRelease);
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(handle);
  if (!shim->vmm.release(handle)) {  // still mapped (or referenced): the memory stays counted
    const CUresult result = real(handle);
    if (result != CUDA_SUCCESS) shim->vmm.undo_release(handle);
    return result;
  }
  const std::optional<Allocation> forgotten = shim->ledger.forget(handle, KeySpace::kVmmHandle);
  const CUresult result = real(handle);
  if (result != CUDA_SUCCESS) shim->vmm.undo_release(handle);
  if (forgotten) settle_vmm_free(*shim, *forgotten, result);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemUnmap);
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(ptr, size);
  const vramspill::core::VmmTracker::Unmapping unmapping = shim->vmm.unmap(ptr, size);
  std::vector<Allocation> forgotten;
  for (uint64_t handle : unmapping.freed_handles) {
    if (auto allocation = shim->ledger.forget(handle, KeySpace::kVmmHandle)) {
      try {
        forgotten.push_back(*allocation);
      } catch (...) {  // cannot hold it until the driver answers: release it now
        shim->ledger.release_forgotten(*allocation);
      }
    }
  }
  const CUresult result = real(ptr, size);
  if (result != CUDA_SUCCESS) shim->vmm.undo_unmap(unmapping);
  for (const Allocation& allocation : forgotten) settle_vmm_free(*shim, allocation, result);
  return result;
}
