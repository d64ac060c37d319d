// Multicast objects (NVLink SHARP: NCCL's NVLS buffers, PyTorch's symmetric memory) bind only
// device memory, so once the program makes or joins one, its cuMemCreate handles no longer
// spill, and a bind the driver refuses of a handle that did spill says why (Note [Multicast
// binds device memory] in placement/vmm_spill.h). The driver's answers pass through.
#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

CUresult note_multicast_use(CUresult result) noexcept {
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result == CUDA_SUCCESS)
    shim->vmm_spill.multicast_used();
  return result;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle,
                                                  const CUmulticastObjectProp* prop) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastCreate);
  return note_multicast_use(real(mcHandle, prop));
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle,
                                                     CUdevice dev) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastAddDevice);
  return note_multicast_use(real(mcHandle, dev));
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle,
                                                   size_t mcOffset,
                                                   CUmemGenericAllocationHandle memHandle,
                                                   size_t memOffset, size_t size,
                                                   unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMulticastBindMem);
  const CUresult result = real(mcHandle, mcOffset, memHandle, memOffset, size, flags);
  const Entry entry;
  if (ShimState* shim = entry.state(); shim != nullptr && result != CUDA_SUCCESS)
    shim->vmm_spill.bind_refused(memHandle, result);
  return result;
}
