// Multicast objects (NVLink SHARP: NCCL's NVLS buffers, PyTorch's symmetric memory) bind only
// device memory, so while a device added to one has no memory bound yet, cuMemCreate handles do
// not spill, and a bind the driver refuses of a handle that did spill says why (Note [Multicast
// binds device memory] in placement/vmm_spill.h). The driver's answers pass through; a multicast
// object's release is cuMemRelease's (hooks/vmm_hooks.cpp).
#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

// After a bind of memory to `object`, by handle (`handle`) or by address (0).
CUresult note_bind(CUresult result, CUmemGenericAllocationHandle object,
                   CUmemGenericAllocationHandle handle) noexcept {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return result;
  if (result == CUDA_SUCCESS) {
    shim->vmm_spill.multicast_bound(object);
  } else if (handle != 0) {
    shim->vmm_spill.bind_refused(handle, result);
  }
  return result;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle,
                                                     CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastAddDevice);
  const CUresult result = real(mcHandle, dev);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS)
    shim->vmm_spill.multicast_device_added(mcHandle);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle,
                                                   size_t mcOffset,
                                                   CUmemGenericAllocationHandle memHandle,
                                                   size_t memOffset, size_t size,
                                                   unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastBindMem);
  return note_bind(real(mcHandle, mcOffset, memHandle, memOffset, size, flags), mcHandle,
                   memHandle);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle,
                                                    size_t mcOffset, CUdeviceptr memptr,
                                                    size_t size, unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastBindAddr);
  return note_bind(real(mcHandle, mcOffset, memptr, size, flags), mcHandle, 0);
}
