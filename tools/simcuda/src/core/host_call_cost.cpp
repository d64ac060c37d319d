#include "core/host_call_cost.h"

#include "core/host_clock.h"
#include "core/vmm.h"

namespace simcuda {
namespace {

// Granules a range of `bytes` covers: at least one, as a 4 KiB allocation takes one.
uint64_t granules_of(uint64_t bytes) { return bytes == 0 ? 1 : (bytes - 1) / kVmmGranularity + 1; }

}  // namespace

void charge_vmm_call(const GranuleCost& cost, const GranuleCount& granules) {
  host_clock_advance(static_cast<double>(granules.device) * cost.device_seconds +
                     static_cast<double>(granules.host) * cost.host_seconds);
}

void charge_launch() { host_clock_advance(host_cost::kLaunchSeconds); }

void charge_linear_allocation(uint64_t bytes) {
  host_clock_advance(static_cast<double>(granules_of(bytes)) * host_cost::kMemAllocSeconds);
}

void charge_linear_free(uint64_t bytes) {
  host_clock_advance(static_cast<double>(granules_of(bytes)) * host_cost::kMemFreeSeconds);
}

}  // namespace simcuda
