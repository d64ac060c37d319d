#include "placement/spill_log.h"

#include "telemetry/log.h"
#include "util/bytes.h"

namespace vramspill::placement {

void log_spilled(core::Route route, uint64_t bytes, int device, const std::string& where,
                 bool over_budget) noexcept {
  try {
    logging::limited(
        LogLevel::kInfo, RateKey::kSpilled, "{} of {} on device {} spilled to {}{}",
        core::route_name(route), format_bytes(bytes), device, where,
        over_budget ? " (over the device budget)" : " (the driver is out of device memory)");
  } catch (...) {  // the spill stands without its log line
  }
}

void log_not_spilled(const std::string& refusal, core::Route route, uint64_t bytes, int device,
                     const std::string& why) {
  logging::limited(LogLevel::kWarn, RateKey::kNotSpilled,
                   "{}{}{} of {} on device {} not spilled: {}", refusal, refusal.empty() ? "" : " ",
                   core::route_name(route), format_bytes(bytes), device, why);
}

std::string host_limit_refusal(const core::HostBudget& budget, uint64_t bytes) {
  const std::string how_to_raise = "raise [spill] host_limit, or VRAMSPILL_SPILL_HOST_LIMIT)";
  if (bytes > budget.limit()) {
    return "the request is larger than the whole host limit (" + format_bytes(budget.limit()) +
           "; " + how_to_raise;
  }
  return "the host limit is reached (" + format_bytes(budget.used()) + " of " +
         format_bytes(budget.limit()) + " in use; " + how_to_raise;
}

}  // namespace vramspill::placement
