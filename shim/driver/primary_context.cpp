#include "driver/primary_context.h"

#include <array>
#include <mutex>

#include "driver/real_driver.h"

namespace vramspill::driver {
namespace {

// Devices whose references are counted; a primary context of a device past them is retained
// and released all the same, and never reset on the shim's account.
constexpr int kCountedDevices = 64;

struct References {
  std::mutex mutex;  // taken around each retain and release, so a count is the driver's
  std::array<int, kCountedDevices> held{};
};

References& references() {
  static References* const counted = new References;  // outlives every static destructor
  return *counted;
}

bool counted(int device) { return device >= 0 && device < kCountedDevices; }

}  // namespace

CUresult retain_primary(CUcontext* primary, int device) noexcept {
  const auto retain = VRAMSPILL_REAL(cuDevicePrimaryCtxRetain);
  if (retain == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  const CUresult result = retain(primary, device);
  if (result == CUDA_SUCCESS && counted(device)) ++refs.held[device];
  return result;
}

CUresult release_primary(int device) noexcept {
  const auto release = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2);
  if (release == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  const CUresult result = release(device);
  if (result == CUDA_SUCCESS && counted(device) && refs.held[device] > 0) --refs.held[device];
  return result;
}

bool reset_if_only_the_shim_holds(int device) noexcept {
  const auto retain = VRAMSPILL_REAL(cuDevicePrimaryCtxRetain);
  const auto release = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2);
  const auto get_state = VRAMSPILL_REAL(cuDevicePrimaryCtxGetState);
  if (retain == nullptr || release == nullptr || get_state == nullptr || !counted(device))
    return false;
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  int given_back = 0;
  while (given_back < refs.held[device] && release(device) == CUDA_SUCCESS) ++given_back;
  unsigned int flags = 0;
  int active = 1;
  const bool reset = get_state(device, &flags, &active) == CUDA_SUCCESS && active == 0;
  // The references are the shim's parts' to give back; a retain the driver refuses now leaves
  // one part without its reference, which the count then says.
  CUcontext primary = nullptr;
  int taken = 0;
  while (taken < given_back && retain(&primary, device) == CUDA_SUCCESS) ++taken;
  refs.held[device] -= given_back - taken;
  return reset;
}

}  // namespace vramspill::driver
