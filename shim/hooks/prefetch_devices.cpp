#include "hooks/prefetch_devices.h"

#include <new>

#include "driver/real_driver.h"
#include "hooks/devices.h"
#include "telemetry/log.h"

namespace vramspill::hooks {

tiers::PrefetchOps* DriverPrefetchDevices::ops(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return nullptr;
  const std::lock_guard lock(mutex_);
  Device& state = devices_[static_cast<std::size_t>(device)];
  if (state.verdict != Verdict::kUnknown) return state.ops.get();
  const auto get_attribute = VRAMSPILL_REAL(cuDeviceGetAttribute);
  int concurrent = 0;
  if (get_attribute == nullptr ||
      get_attribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device) !=
          CUDA_SUCCESS)
    return nullptr;  // asked again next time
  const char* why_not = nullptr;
  if (is_integrated(device)) {
    why_not = "it is an integrated GPU, with no memory of its own";
  } else if (concurrent == 0) {
    why_not = "it has no concurrent managed access (CONCURRENT_MANAGED_ACCESS is 0)";
  }
  if (why_not != nullptr) {
    state.verdict = Verdict::kNone;
    logging::warn("[tiered] mover = \"prefetch\" cannot move device {}'s blocks: {}; they are "
                  "tiered with the remap mover",
                  device, why_not);
    return nullptr;
  }
  state.ops.reset(new (std::nothrow) tiers::DriverPrefetchOps(device));
  if (state.ops == nullptr) return nullptr;
  state.verdict = Verdict::kMover;
  logging::info("device {}: tiered blocks are managed memory moved by prefetches", device);
  return state.ops.get();
}

}  // namespace vramspill::hooks
