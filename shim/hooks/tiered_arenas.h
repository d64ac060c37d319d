// The granule arena of each device on the real driver (placement::ArenaSource): made on first
// use where the device can hold one, with its driver calls (tiers/driver_granule_ops.h).
//
// Note [Where tiered mode runs]
// A device gets an arena when the driver says it can hold what an arena is made of: VMM memory
// (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), host-located VMM memory (on the
// device's own NUMA node where it can be, else anywhere on the host: the location the
// cuMemCreate spill uses, tiers/host_vmm_tier.h), and allocation granularities, device- and
// host-located, that divide the 2 MiB granule. An integrated device has no memory of its own to
// move data out of (Note [Integrated devices] in hooks/devices.h). Elsewhere `tiered` says once
// why and places the device's allocations as `auto` does. The answer is kept per device; a
// query the driver refused is asked again next time.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "config/config.h"
#include "placement/tiered_placement.h"
#include "tiers/driver_granule_ops.h"
#include "tiers/granule_arena.h"
#include "tiers/host_vmm_tier.h"

namespace vramspill::hooks {

class DriverArenaSource final : public placement::ArenaSource {
 public:
  // `captures`: Note [The capture gate]. `dead`: the blocks whose moves need no copy (Note [Moves
  // of dead contents] in tiers/granule_arena.h).
  DriverArenaSource(const TieredConfig& config, tiers::HostVmmTier& host_vmm,
                    core::CaptureGate& captures, const tiers::DeadContents& dead) noexcept
      : config_(config), host_vmm_(host_vmm), captures_(captures), dead_(dead) {}
  DriverArenaSource(const DriverArenaSource&) = delete;
  DriverArenaSource& operator=(const DriverArenaSource&) = delete;

  tiers::GranuleArena* arena(int device) noexcept override;
  bool may_synchronize() noexcept override { return !captures_.capturing(); }

 private:
  enum class Verdict : uint8_t { kUnknown, kArena, kNone };
  struct Device {
    Verdict verdict = Verdict::kUnknown;
    std::unique_ptr<tiers::DriverGranuleOps> ops;
    std::unique_ptr<tiers::GranuleArena> arena;
  };
  static constexpr std::size_t kDevices = 64;

  // Why `device` cannot hold an arena ("" when it can, with `host_numa_node` set: negative for
  // a node-less host location); nullopt when the driver did not answer.
  std::optional<std::string> unsupported(int device, int& host_numa_node) noexcept;

  const TieredConfig& config_;
  tiers::HostVmmTier& host_vmm_;
  core::CaptureGate& captures_;
  const tiers::DeadContents& dead_;
  std::mutex mutex_;
  std::array<Device, kDevices> devices_{};
};

}  // namespace vramspill::hooks
