// The ledger's texts for people: the refusal paragraph logged with CUDA_ERROR_OUT_OF_MEMORY, and
// the exit summary. Cold paths: they may allocate, and their callers catch what that throws.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "util/bytes.h"
#include "core/ledger.h"

namespace vramspill::core {

namespace {

std::string hex(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%" PRIx64, value);
  return buffer;
}

const char* key_prefix(KeySpace space) {
  switch (space) {
    case KeySpace::kVmmHandle:
      return "handle ";
    case KeySpace::kArray:
      return "array ";
    case KeySpace::kPointer:
      break;
  }
  return "";
}

// "cuMemAlloc 3.0 GiB in 12 allocations, cuMemAllocPitch 1.0 MiB in 1 allocation"; pool routes
// are left out (their memory is counted as the pools' reserve) unless `with_pools`.
std::string route_holdings(const DeviceSnapshot& d, bool with_pools) {
  std::string out;
  for (std::size_t r = 0; r < kRouteCount; ++r) {
    const auto route = static_cast<Route>(r);
    const RouteSnapshot& s = d.routes[r];
    if (s.live_count == 0 || is_spill_route(route) || is_pool_route(route) != with_pools) continue;
    if (!out.empty()) out += ", ";
    out += route_name(route);
    out += ' ';
    out += format_bytes(s.live_bytes);
    out += " in " + std::to_string(s.live_count) +
           (s.live_count == 1 ? " allocation" : " allocations");
  }
  return out;
}

}  // namespace

std::string Ledger::refusal_text(int device, Route route, uint64_t bytes,
                                 uint64_t pool_free_reserved, uint64_t needed) const {
  const DeviceSnapshot d = snapshot(device);
  std::string text = route_name(route);
  text += " of " + format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes) on device " +
          std::to_string(device) + " refused: ";
  if (needed != bytes) {
    text += "beyond its pool's unused " + format_bytes(pool_free_reserved) + " it needs " +
            format_bytes(needed) + " more, and ";
  }
  text += "the device budget is " + format_bytes(d.limit_bytes);
  if (d.total_bytes != 0) text += " of " + format_bytes(d.total_bytes);
  text += ", of which " + format_bytes(d.held_bytes) + " is held";
  const uint64_t room = d.held_bytes >= d.limit_bytes ? 0 : d.limit_bytes - d.held_bytes;
  text += " and " + format_bytes(room) + " is free. Held by route: ";
  std::string holdings = route_holdings(d, /*with_pools=*/false);
  if (d.pool_reserved_bytes != 0) {
    if (!holdings.empty()) holdings += ", ";
    holdings += "stream-ordered pools " + format_bytes(d.pool_reserved_bytes) + " reserved";
    const std::string handed_out = route_holdings(d, /*with_pools=*/true);
    if (!handed_out.empty()) holdings += " (handed out: " + handed_out + ")";
  }
  if (d.tiered_bytes != 0) {
    if (!holdings.empty()) holdings += ", ";
    holdings += "tiered mode's device granules " + format_bytes(d.tiered_bytes);
  }
  text += holdings.empty() ? "nothing recorded (in-flight requests only)" : holdings;
  text += '.';
  const std::vector<Allocation> top = largest(device, kRefusalLargestCount);
  if (!top.empty()) {
    text += " Largest live allocations: ";
    for (std::size_t i = 0; i < top.size(); ++i) {
      if (i != 0) text += ", ";
      text += key_prefix(top[i].space()) + hex(top[i].key) + ' ' + format_bytes(top[i].bytes) +
              " (" + route_name(top[i].route) + ')';
    }
    text += '.';
  }
  return text;
}

std::string Ledger::device_summary(const DeviceSnapshot& d) const {
  std::string line = "device " + std::to_string(d.device) + ": peak " + format_bytes(d.peak_bytes);
  line += d.configured && d.limit_bytes != kUnlimited
              ? " of " + format_bytes(d.limit_bytes) + " budget"
              : std::string(", no budget");
  std::string at_peak;
  for (std::size_t r = 0; r < kRouteCount; ++r) {
    const auto route = static_cast<Route>(r);
    if (!counts_against_device(route) || d.routes[r].bytes_at_peak == 0) continue;
    if (!at_peak.empty()) at_peak += ", ";
    at_peak += std::string(route_name(route)) + ' ' + format_bytes(d.routes[r].bytes_at_peak);
  }
  if (d.pool_reserved_at_peak != 0) {
    if (!at_peak.empty()) at_peak += ", ";
    at_peak += "stream-ordered pools " + format_bytes(d.pool_reserved_at_peak);
  }
  if (d.tiered_at_peak != 0) {
    if (!at_peak.empty()) at_peak += ", ";
    at_peak += "tiered granules " + format_bytes(d.tiered_at_peak);
  }
  if (!at_peak.empty()) line += " (" + at_peak + ')';
  std::string seen;
  std::string spilled;
  for (std::size_t r = 0; r < kRouteCount; ++r) {
    const RouteSnapshot& route = d.routes[r];
    if (route.allocations == 0) continue;
    std::string& list = is_spill_route(static_cast<Route>(r)) ? spilled : seen;
    if (!list.empty()) list += ", ";
    list += std::string(route_name(static_cast<Route>(r))) + " x" +
            std::to_string(route.allocations);
    if (&list == &spilled) list += " (peak " + format_bytes(route.peak_live_bytes) + ')';
  }
  if (!seen.empty()) line += "; routes seen: " + seen;
  line += "; " + std::to_string(d.over_budget) + " over the budget, " +
          std::to_string(d.refused()) + " refused";
  if (!spilled.empty()) line += "; spilled: " + spilled;
  return line;
}

std::string Ledger::summary_line() const noexcept {
  try {
    std::string line;
    for (int device : devices()) {
      if (!line.empty()) line += " | ";
      line += device_summary(snapshot(device));
    }
    if (line.empty()) line = "no device memory recorded";
    if (const uint64_t missed = missed_frees(); missed != 0) {
      line += " | " + std::to_string(missed) + " allocations replaced without a free seen";
    }
    if (const uint64_t errors = internal_errors(); errors != 0) {
      line += " | ledger: " + std::to_string(errors) + " internal errors (failed open)";
    }
    return line;
  } catch (...) {
    note_internal_error();
    return {};
  }
}

}  // namespace vramspill::core
