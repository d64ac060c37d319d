#include "core/host_call_cost.h"

#include <algorithm>

#include "core/driver.h"
#include "core/host_clock.h"
#include "core/vmm.h"

namespace simcuda {

void charge_vmm_call(const GranuleCost& cost, const GranuleCount& granules) {
  GranuleCount charged = granules;
  if (Driver::instance()->config().cost.vmm_cost_per_call) {
    charged.device = std::min<uint64_t>(charged.device, 1);
    charged.host = std::min<uint64_t>(charged.host, 1);
  }
  host_clock_advance(static_cast<double>(charged.device) * cost.device_seconds +
                     static_cast<double>(charged.host) * cost.host_seconds);
}

void charge_launch() { host_clock_advance(host_cost::kLaunchSeconds); }

void charge_linear_allocation() { host_clock_advance(host_cost::kMemAllocSeconds); }

void charge_linear_free() { host_clock_advance(host_cost::kMemFreeSeconds); }

}  // namespace simcuda
