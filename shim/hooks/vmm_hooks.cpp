// The VMM routes (cuMemCreate, cuMemMap, cuMemUnmap, cuMemRelease, cuMemRetainAllocationHandle):
// device-located physical memory counts against the budget from cuMemCreate until the driver
// frees it, which is at the last cuMemRelease or the last cuMemUnmap, whichever comes later
// (Note [VMM memory lives until its last mapping goes] in core/vmm_tracker.h). Host-located
// physical memory the program asks for takes no device memory; it is pinned memory, which counts
// against the host limit as long (Note [The program's host-located handles] in
// placement/vmm_books.h). A device-located cuMemCreate that does not fit may be made
// host-located instead, charged to the host budget until the driver frees it (Note
// [Host-located VMM spills] in placement/vmm_spill.h).
// The books are placement's (placement/vmm_books.h).
#include "hooks/admission.h"
#include "hooks/hook.h"

using vramspill::core::Route;
using vramspill::hooks::Allocated;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

VRAMSPILL_HOOK CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                            const CUmemAllocationProp* prop,
                                            unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemCreate);
  const auto create = [&] { return real(handle, size, prop, flags); };
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || prop == nullptr || handle == nullptr) return create();
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    const CUresult result = create();
    if (result == CUDA_SUCCESS && prop->location.type != CU_MEM_LOCATION_TYPE_INVALID)
      shim->vmm_books.created_on_host(*handle, size);
    return result;
  }
  const vramspill::placement::VmmSpillRequest spill{
      .device = prop->location.id, .bytes = size, .prop = prop, .flags = flags};
  if (const CUresult result = vramspill::hooks::know_device(*shim, prop->location.id);
      result != CUDA_SUCCESS)
    return result;
  return shim->admission.admit_and_allocate(
      prop->location.id, Route::kMemCreate, size,
      vramspill::placement::SpillTarget{.vmm = &spill, .handle_out = handle},
      [&](Allocated& allocated) {
        const CUresult result = create();
        if (result == CUDA_SUCCESS) allocated.key = *handle;
        return result;
      },
      [&](const Allocated& allocated) { shim->vmm_books.created(allocated.key); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                            void* addr) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemRetainAllocationHandle);
  const Entry entry;
  ShimState* shim = entry.state();
  // A tiered block is cuMemAlloc memory to the program, whose handle the driver refuses. The
  // granules' handles are the shim's own: one the program held would stay behind on the memory
  // a move leaves, and keep it alive after the arena lets it go.
  if (shim != nullptr && shim->tiered.block_containing(reinterpret_cast<CUdeviceptr>(addr)))
    return CUDA_ERROR_INVALID_VALUE;
  if (shim == nullptr || handle == nullptr) return real(handle, addr);
  return shim->vmm_books.retain(*handle, [&] { return real(handle, addr); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                         CUmemGenericAllocationHandle handle,
                                         unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemMap);
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(ptr, size, offset, handle, flags);
  return shim->vmm_books.map(ptr, size, handle,
                             [&] { return real(ptr, size, offset, handle, flags); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemRelease);
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(handle);
  return shim->vmm_books.release(handle, [&] {
    // A multicast object is released so too, and leaves its books before the driver may hand
    // its value out again (Note [Multicast binds device memory]).
    vramspill::placement::MulticastBooks& multicast = shim->vmm_spill.multicast();
    const auto object = multicast.take(handle);
    const CUresult result = real(handle);
    if (object && result != CUDA_SUCCESS) multicast.put_back(handle, *object);
    return result;
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemUnmap);
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return real(ptr, size);
  // cuMemAlloc memory to the program, which the driver would not unmap: unmapped, the shim's
  // granules would leave the block (and the next move) faulting.
  if (size != 0 && (shim->tiered.block_containing(ptr) ||
                    shim->tiered.block_containing(ptr + size - 1)))
    return CUDA_ERROR_INVALID_VALUE;
  return shim->vmm_books.unmap(ptr, size, [&] { return real(ptr, size); });
}
