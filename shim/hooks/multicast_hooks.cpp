// Multicast objects (NVLink SHARP: NCCL's NVLS buffers, PyTorch's symmetric memory) bind only
// device memory, so while one of the program's objects waits for memory, cuMemCreate handles do
// not spill, and a bind the driver refuses of a handle that did spill says why (Note [Multicast
// binds device memory] in placement/vmm_spill.h). The driver's answers pass through; a multicast
// object's release is cuMemRelease's (hooks/vmm_hooks.cpp).
#include <optional>

#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

// After a bind of `size` bytes to `object` of the memory `handle` names or, when it is 0, of the
// memory mapped at `address`.
CUresult note_bind(CUresult result, CUmemGenericAllocationHandle object, size_t size,
                   CUmemGenericAllocationHandle handle, CUdeviceptr address) noexcept {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return result;
  if (result == CUDA_SUCCESS) {
    shim->vmm_spill.multicast().bound(object, size);
  } else if (const std::optional<uint64_t> memory =
                 handle != 0 ? std::optional<uint64_t>(handle) : shim->vmm.handle_at(address)) {
    shim->vmm_spill.bind_refused(*memory, result);
  }
  return result;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle,
                                                  const CUmulticastObjectProp* prop) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastCreate);
  const CUresult result = real(mcHandle, prop);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS)
    (void)shim->vmm_spill.multicast().created(*mcHandle, prop->size);
  return result;
}

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
  return note_bind(real(mcHandle, mcOffset, memHandle, memOffset, size, flags), mcHandle, size,
                   memHandle, 0);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle,
                                                    size_t mcOffset, CUdeviceptr memptr,
                                                    size_t size, unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastBindAddr);
  return note_bind(real(mcHandle, mcOffset, memptr, size, flags), mcHandle, size, 0, memptr);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle,
                                                  CUdevice dev, size_t mcOffset, size_t size) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastUnbind);
  const CUresult result = real(mcHandle, dev, mcOffset, size);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS)
    shim->vmm_spill.multicast().unbound(mcHandle, size);
  return result;
}
