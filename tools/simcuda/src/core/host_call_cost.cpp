#include "core/host_call_cost.h"

#include "core/host_clock.h"
#include "core/vmm.h"

namespace simcuda {

void charge_vmm_call(const GranuleCost& cost, const GranuleCount& granules) {
  host_clock_advance(static_cast<double>(granules.device) * cost.device_seconds +
                     static_cast<double>(granules.host) * cost.host_seconds);
}

void charge_launch() { host_clock_advance(host_cost::kLaunchSeconds); }

void charge_linear_allocation() { host_clock_advance(host_cost::kMemAllocSeconds); }

void charge_linear_free() { host_clock_advance(host_cost::kMemFreeSeconds); }

}  // namespace simcuda
