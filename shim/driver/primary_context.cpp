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
  std::array<uint64_t, kCountedDevices> generation{};
};

References& references() {
  static References* const counted = new References;  // outlives every static destructor
  return *counted;
}

bool counted(int device) { return device >= 0 && device < kCountedDevices; }

// Whether `reference` still holds its context, with the references' lock held.
bool held_locked(const References& refs, const PrimaryReference& reference) {
  if (reference.device < 0) return false;
  return !counted(reference.device) ||
         reference.generation == refs.generation[static_cast<std::size_t>(reference.device)];
}

}  // namespace

CUresult retain_primary(CUcontext* primary, int device, PrimaryReference& reference) noexcept {
  const auto retain = VRAMSPILL_REAL(cuDevicePrimaryCtxRetain);
  if (retain == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  const CUresult result = retain(primary, device);
  if (result != CUDA_SUCCESS) return result;
  reference = {.device = device, .generation = 0};
  if (counted(device)) {
    const auto index = static_cast<std::size_t>(device);
    ++refs.held[index];
    reference.generation = refs.generation[index];
  }
  return result;
}

void release_primary(PrimaryReference& reference) noexcept {
  const auto release = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2);
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  if (release != nullptr && held_locked(refs, reference) &&
      release(reference.device) == CUDA_SUCCESS && counted(reference.device)) {
    int& held = refs.held[static_cast<std::size_t>(reference.device)];
    if (held > 0) --held;
  }
  reference = {};
}

bool still_held(const PrimaryReference& reference) noexcept {
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  return held_locked(refs, reference);
}

bool reset_if_only_the_shim_holds(int device) noexcept {
  const auto retain = VRAMSPILL_REAL(cuDevicePrimaryCtxRetain);
  const auto release = VRAMSPILL_REAL(cuDevicePrimaryCtxRelease_v2);
  const auto get_state = VRAMSPILL_REAL(cuDevicePrimaryCtxGetState);
  if (retain == nullptr || release == nullptr || get_state == nullptr || !counted(device))
    return false;
  References& refs = references();
  const std::lock_guard lock(refs.mutex);
  const auto index = static_cast<std::size_t>(device);
  int given_back = 0;
  while (given_back < refs.held[index] && release(device) == CUDA_SUCCESS) ++given_back;
  unsigned int flags = 0;
  int active = 1;
  const bool reset = get_state(device, &flags, &active) == CUDA_SUCCESS && active == 0;
  if (!reset) {
    CUcontext primary = nullptr;
    int taken = 0;
    while (taken < given_back && retain(&primary, device) == CUDA_SUCCESS) ++taken;
    if (taken == given_back) return false;
    // Which part went without its reference cannot be told: all of them are given up, as after
    // a reset (the parts retain anew only once the context is reset), and none of them releases.
    while (taken > 0 && release(device) == CUDA_SUCCESS) --taken;
  }
  refs.held[index] = 0;
  ++refs.generation[index];
  return reset;
}

}  // namespace vramspill::driver
