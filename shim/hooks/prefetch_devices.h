// The prefetch mover's driver calls for each device on the real driver
// (placement::PrefetchDevices; [tiered] mover = "prefetch"): made on first use where the device
// can move managed memory by prefetches while kernels run, which cuMemPrefetchAsync requires
// (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) and an integrated device has no use for (Note
// [Integrated devices] in hooks/devices.h). Without concurrent managed access the device's blocks
// are tiered with the remap mover, said once; an integrated device's are not tiered at all. The
// answer is kept per device; a query the driver refused is asked again next time.
#pragma once

#include <array>
#include <memory>
#include <mutex>

#include "placement/prefetch_placement.h"
#include "tiers/driver_prefetch_ops.h"

namespace vramspill::hooks {

class DriverPrefetchDevices final : public placement::PrefetchDevices {
 public:
  // `captures`: held by the mover while it records on or waits from a program's stream (Note [A
  // capture begun while a move is queued] in tiers/driver_prefetch_ops.h).
  explicit DriverPrefetchDevices(core::CaptureGate& captures) noexcept : captures_(captures) {}
  DriverPrefetchDevices(const DriverPrefetchDevices&) = delete;
  DriverPrefetchDevices& operator=(const DriverPrefetchDevices&) = delete;

  tiers::PrefetchOps* ops(int device) noexcept override;
  core::CaptureGate::Hold hold_if_may_move() noexcept override {
    return captures_.hold_if_none();
  }

 private:
  enum class Verdict : uint8_t { kUnknown, kMover, kNone };
  struct Device {
    Verdict verdict = Verdict::kUnknown;
    std::unique_ptr<tiers::DriverPrefetchOps> ops;
  };
  static constexpr std::size_t kDevices = 64;

  core::CaptureGate& captures_;
  std::mutex mutex_;
  std::array<Device, kDevices> devices_{};
};

}  // namespace vramspill::hooks
