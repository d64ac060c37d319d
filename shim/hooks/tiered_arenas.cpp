#include "hooks/tiered_arenas.h"

#include <new>

#include "driver/real_driver.h"
#include "hooks/devices.h"
#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

// The smallest granularity the driver allows for memory at `location`, or nullopt.
std::optional<size_t> granularity(CUmemLocation location) noexcept {
  const auto get_granularity = VRAMSPILL_REAL(cuMemGetAllocationGranularity);
  if (get_granularity == nullptr) return std::nullopt;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = location;
  size_t bytes = 0;
  if (get_granularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
    return std::nullopt;
  return bytes;
}

bool divides_a_granule(size_t bytes) { return bytes != 0 && tiers::kGranuleBytes % bytes == 0; }

}  // namespace

std::optional<std::string> DriverArenaSource::unsupported(int device,
                                                          int& host_numa_node) noexcept {
  try {
    if (is_integrated(device)) return "it is an integrated GPU, with no memory of its own";
    const std::optional<int> vmm =
        device_attribute(device, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
    if (!vmm) return std::nullopt;
    if (*vmm == 0) return "the driver has no virtual memory management (VMM) for it";
    const std::optional<tiers::HostVmmLocation> host = host_vmm_.location(device);
    if (!host) return std::nullopt;
    using Kind = tiers::HostVmmLocation::Kind;
    if (host->kind == Kind::kNone)
      return "it cannot map host-located VMM memory (HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED "
             "and HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED are 0; CUDA 12.2 or newer and a "
             "recent driver have them)";
    host_numa_node = host->kind == Kind::kHostNuma ? host->numa_node : -1;
    const CUmemLocation host_location =
        host->kind == Kind::kHostNuma
            ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST_NUMA, host->numa_node}
            : CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0};
    for (const CUmemLocation location :
         {CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device}, host_location}) {
      const std::optional<size_t> bytes = granularity(location);
      if (!bytes) return std::nullopt;
      if (!divides_a_granule(*bytes))
        return "its VMM allocation granularity (" + std::to_string(*bytes) +
               " bytes) does not divide the 2 MiB granule";
    }
    return std::string();
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
}

tiers::GranuleArena* DriverArenaSource::arena(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return nullptr;
  const std::lock_guard lock(mutex_);
  Device& state = devices_[static_cast<std::size_t>(device)];
  if (state.verdict != Verdict::kUnknown) return state.arena.get();
  int host_numa_node = -1;
  const std::optional<std::string> why_not = unsupported(device, host_numa_node);
  if (!why_not) return nullptr;  // asked again next time
  if (!why_not->empty()) {
    state.verdict = Verdict::kNone;
    // The prefetch mover needs neither VMM nor host-located memory, only concurrent managed
    // access; it is not chosen for the user, as no GPU has measured it yet (README, "The
    // prefetch mover").
    const bool prefetch_could =
        !is_integrated(device) && concurrent_managed_access(device).value_or(false);
    logging::warn(
        "[spill] mode = \"tiered\" cannot tier device {}: {}; its allocations are "
        "placed as in \"auto\" mode{}",
        device, *why_not,
        prefetch_could ? " ([tiered] mover = \"prefetch\" would tier them as managed memory)"
                       : "");
    return nullptr;
  }
  const uint64_t keep = config_.keep / tiers::kGranuleBytes;
  state.ops.reset(new (std::nothrow)
                      tiers::DriverGranuleOps(device, host_numa_node, &captures_));
  if (state.ops == nullptr) return nullptr;
  state.arena.reset(new (std::nothrow) tiers::GranuleArena(
      *state.ops, {.keep_device_granules = keep, .keep_host_granules = keep, .dead = &dead_}));
  if (state.arena == nullptr) return nullptr;
  state.verdict = Verdict::kArena;
  logging::info("device {}: tiered mode, {} policy, host granules on {}", device, config_.policy,
                host_numa_node >= 0 ? "NUMA node " + std::to_string(host_numa_node) : "the host");
  return state.arena.get();
}

}  // namespace vramspill::hooks
