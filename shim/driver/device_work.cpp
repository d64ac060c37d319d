#include "driver/device_work.h"

#include "driver/context_scope.h"
#include "driver/primary_context.h"
#include "driver/real_driver.h"

namespace vramspill::driver {
namespace {

// Runs `work` in the calling thread's context when it is on `device`, otherwise in the device's
// primary context.
template <typename Work>
CUresult in_context_of(int device, Work&& work) {
  const auto get_device = VRAMSPILL_REAL(cuCtxGetDevice);
  if (get_device == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUdevice current = -1;
  if (get_device(&current) == CUDA_SUCCESS && current == device) return work();
  CUcontext primary = nullptr;
  PrimaryReference reference;
  if (retain_primary(&primary, device, reference) != CUDA_SUCCESS)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUresult result = CUDA_SUCCESS;
  {
    const ContextScope scope(primary);
    result = scope.entered() ? work() : scope.status();
  }
  release_primary(reference);
  return result;
}

}  // namespace

CUresult synchronize_device(int device) {
  const auto synchronize = VRAMSPILL_REAL(cuCtxSynchronize);
  if (synchronize == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return in_context_of(device, [&] { return synchronize(); });
}

CUresult synchronize_device_if_active(int device) {
  const auto get_device = VRAMSPILL_REAL(cuCtxGetDevice);
  const auto get_state = VRAMSPILL_REAL(cuDevicePrimaryCtxGetState);
  if (get_device == nullptr || get_state == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUdevice current = -1;
  unsigned int flags = 0;
  int active = 0;
  if (!(get_device(&current) == CUDA_SUCCESS && current == device) &&
      (get_state(device, &flags, &active) != CUDA_SUCCESS || active == 0))
    return CUDA_SUCCESS;
  return synchronize_device(device);
}

uint64_t active_primary_context(int device) {
  const auto get_state = VRAMSPILL_REAL(cuDevicePrimaryCtxGetState);
  unsigned int flags = 0;
  int active = 0;
  CUcontext primary = nullptr;
  PrimaryReference reference;
  if (get_state == nullptr || get_state(device, &flags, &active) != CUDA_SUCCESS || active == 0 ||
      retain_primary(&primary, device, reference) != CUDA_SUCCESS)
    return 0;
  release_primary(reference);  // active, so the reference this took was not its last
  return reinterpret_cast<uint64_t>(primary);
}

CUresult wait_for_stream_ends(int device, std::span<const StreamEnd> ends) {
  const auto synchronize_stream = VRAMSPILL_REAL(cuStreamSynchronize);
  const auto synchronize_event = VRAMSPILL_REAL(cuEventSynchronize);
  if (synchronize_stream == nullptr || synchronize_event == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  return in_context_of(device, [&] {
    for (const StreamEnd& end : ends) {
      const CUresult result = end.event != 0
                                  ? synchronize_event(reinterpret_cast<CUevent>(end.event))
                                  : synchronize_stream(reinterpret_cast<CUstream>(end.stream));
      if (result != CUDA_SUCCESS) return result;
    }
    return CUDA_SUCCESS;
  });
}

}  // namespace vramspill::driver
