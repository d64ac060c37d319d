// Peer access: what devices can reach each other's memory, and the per-context switch that lets
// kernels do it (Note [Peer access] in core/peer_access.h).
#include "core/api.h"
#include "core/context.h"
#include "core/driver.h"
#include "core/peer_access.h"

using simcuda::Context;
using simcuda::Driver;

namespace {

bool valid_device(CUdevice ordinal) { return Driver::instance()->device(ordinal) != nullptr; }

// The checks cuCtxEnablePeerAccess and cuCtxDisablePeerAccess share: a current context and a
// live peer context. On success `*current` and `*peer` are set.
CUresult resolve_contexts(CUcontext peer_handle, Context** current, Context** peer) {
  *current = simcuda::current_context();
  if (*current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *peer = simcuda::context_from_handle(peer_handle);
  return *peer != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev,
                                                      CUdevice peerDev) {
  SIMCUDA_ENTER("cuDeviceCanAccessPeer");
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  // An NVLink-style node: every device reaches every other; a device is not its own peer.
  *canAccessPeer = dev != peerDev ? 1 : 0;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib,
                                                        CUdevice srcDevice, CUdevice dstDevice) {
  SIMCUDA_ENTER("cuDeviceGetP2PAttribute");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(srcDevice) || !valid_device(dstDevice) || srcDevice == dstDevice)
    return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      *value = 0;  // every link is alike, so all rank first
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
      *value = 0;  // all atomics are native, not only some
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  SIMCUDA_ENTER("cuCtxEnablePeerAccess");
  Context* current = nullptr;
  Context* peer = nullptr;
  if (CUresult result = resolve_contexts(peerContext, &current, &peer); result != CUDA_SUCCESS)
    return result;
  if (peer == current) return CUDA_ERROR_INVALID_CONTEXT;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // As documented for a pair that cuDeviceCanAccessPeer refuses, which another context of the
  // same device is.
  if (peer->device == current->device) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  return simcuda::enable_peer_access(*current, *peer);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  SIMCUDA_ENTER("cuCtxDisablePeerAccess");
  Context* current = nullptr;
  Context* peer = nullptr;
  if (CUresult result = resolve_contexts(peerContext, &current, &peer); result != CUDA_SUCCESS)
    return result;
  return simcuda::disable_peer_access(*current, *peer);
}
