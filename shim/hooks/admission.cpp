#include "hooks/admission.h"

#include <atomic>

#include "driver/real_driver.h"
#include "hooks/spill_placement.h"

namespace vramspill::hooks {
namespace {

// A bit per device seen, so know_device() costs one relaxed load after the first time.
std::atomic<uint64_t> known_devices{0};

}  // namespace

std::optional<int> current_device() {
  const auto get_device = VRAMSPILL_REAL(cuCtxGetDevice);
  CUdevice device = 0;
  if (get_device == nullptr || get_device(&device) != CUDA_SUCCESS) return std::nullopt;
  return device;
}

void know_device(ShimState& shim, int device) {
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (known_devices.load(std::memory_order_relaxed) & bit) != 0) return;
  const auto total_memory = VRAMSPILL_REAL(cuDeviceTotalMem_v2);
  size_t total = 0;
  if (total_memory == nullptr || total_memory(&total, device) != CUDA_SUCCESS) return;
  shim.ledger.set_device(device, total, shim.config.device.limit(total));
  known_devices.fetch_or(bit, std::memory_order_relaxed);
}

core::Admission driver_refusal(int device, core::Route route, uint64_t bytes) {
  core::Admission admission;
  admission.device = device;
  admission.route = route;
  admission.requested_bytes = bytes;
  return admission;
}

CUresult refuse_or_spill(ShimState& shim, const core::Admission& admission,
                         const SpillTarget& spill_target) {
  if (spill_target.out == nullptr) {
    if (!admission.admitted) {
      // The refusal names the route: "cuMemAlloc of 1.0 GiB (...) on device 0 refused: ...".
      logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "{}", admission.refusal);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const SpillRequest request{.device = admission.device,
                             .route = admission.route,
                             .bytes = spill_target.bytes,
                             .stream = spill_target.stream,
                             .stream_ordered = spill_target.stream_ordered,
                             .managed_flags = spill_target.managed_flags};
  // An admitted admission has no refusal text: empty then, the driver refused.
  const CUresult result = spill(shim, request, admission.refusal, spill_target.out);
  if (result == CUDA_SUCCESS && spill_target.pitch_out != nullptr)
    *spill_target.pitch_out = spill_target.pitch;
  return result;
}

void settle_free(ShimState& shim, const core::Allocation& forgotten, CUresult result) {
  if (result != CUDA_SUCCESS) {
    shim.ledger.reinstate(forgotten);
    return;
  }
  shim.ledger.release_forgotten(forgotten);
  // The block's pool is not recorded (it may be an explicit one, not the device's current
  // pool): read every pool's figure again (Note [Refreshing pool figures]).
  if (core::is_pool_route(forgotten.route)) refresh_pools(shim);
}

}  // namespace vramspill::hooks
