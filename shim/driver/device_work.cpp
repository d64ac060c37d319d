#include "driver/device_work.h"

#include "driver/context_scope.h"
#include "driver/real_driver.h"

namespace vramspill::driver {

CUresult synchronize_device(int device) {
  const auto get_device = VRAMSPILL_REAL(cuCtxGetDevice);
  const auto synchronize = VRAMSPILL_REAL(cuCtxSynchronize);
  if (get_device == nullptr || synchronize == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUdevice current = -1;
  if (get_device(&current) == CUDA_SUCCESS && current == device) return synchronize();
  const auto retain = VRAMSPILL_REAL(cuDevicePrimaryCtxRetain);
  const auto release = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2);
  CUcontext primary = nullptr;
  if (retain == nullptr || release == nullptr || retain(&primary, device) != CUDA_SUCCESS)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUresult result = CUDA_SUCCESS;
  {
    const ContextScope scope(primary);
    result = scope.entered() ? synchronize() : scope.status();
  }
  release(device);
  return result;
}

}  // namespace vramspill::driver
