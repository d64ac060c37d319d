#include "stat_view.h"

#include <cstdio>

#include "human_format.h"
#include "util/bytes.h"

namespace vramspill::cli {
namespace {

double seconds_between(uint64_t earlier_ns, uint64_t later_ns) {
  return later_ns > earlier_ns ? static_cast<double>(later_ns - earlier_ns) / 1e9 : 0.0;
}

// Columns of the device table; sizes are at most "1023.9 KiB" (10 characters).
constexpr const char* kDeviceHeader =
    "  dev        held        peak       limit       total     managed        host    spills"
    "   refused\n";

std::string device_row(const telemetry::DeviceFigures& device) {
  char row[256];
  std::snprintf(row, sizeof row, "  %3d  %10s  %10s  %10s  %10s  %10s  %10s  %8llu  %8llu\n",
                device.device, format_bytes(device.device_bytes).c_str(),
                format_bytes(device.device_peak_bytes).c_str(),
                format_bytes(device.limit_bytes).c_str(), format_bytes(device.total_bytes).c_str(),
                format_bytes(device.spilled_managed_bytes).c_str(),
                format_bytes(device.spilled_host_bytes).c_str(),
                static_cast<unsigned long long>(device.spills),
                static_cast<unsigned long long>(device.refused));
  return row;
}

// Tiered mode's figures, when the job is in it: one line for the moves, one per device.
std::string tiered_lines(const telemetry::StatsSnapshot& process) {
  std::string text;
  for (const telemetry::DeviceFigures& device : process.devices) {
    if (device.tiered_device_bytes == 0 && device.tiered_host_bytes == 0) continue;
    text += "  dev " + std::to_string(device.device) + " tiered blocks: " +
            format_bytes(device.tiered_device_bytes) + " on the device, " +
            format_bytes(device.tiered_host_bytes) + " on the host\n";
  }
  const telemetry::StatsTiered& moved = process.tiered;
  if (text.empty() && moved.windows == 0 && moved.launches == 0) return text;
  char windows[64];
  std::snprintf(windows, sizeof windows, "%.1f ms", static_cast<double>(moved.window_ns) / 1e6);
  // What the moves cost: their VMM calls per GiB moved, and the bytes over the windows' time.
  const uint64_t moved_bytes = moved.evicted_bytes + moved.promoted_bytes;
  char cost[128] = "";
  if (moved_bytes != 0 && moved.window_ns != 0) {
    std::snprintf(cost, sizeof cost, ", %.0f VMM calls per GiB moved, %.2f GB/s over the windows",
                  static_cast<double>(moved.move_vmm_calls) * double(uint64_t{1} << 30) /
                      static_cast<double>(moved_bytes),
                  static_cast<double>(moved_bytes) / static_cast<double>(moved.window_ns));
  }
  return "  tiered: " + format_bytes(moved.evicted_bytes) + " evicted, " +
         format_bytes(moved.promoted_bytes) + " promoted, " + std::to_string(moved.windows) +
         " remap windows (" + windows + cost + "), " + std::to_string(moved.launches) +
         " kernel launches (" + std::to_string(moved.unreadable_launches) + " unreadable)\n" + text;
}

std::string process_block(const telemetry::StatsSnapshot& process, uint64_t now_unix_ns) {
  std::string text = "pid " + std::to_string(process.pid) + "  " +
                     (process.command.empty() ? "?" : process.command) + "\n";
  text += "  running " + format_duration(seconds_between(process.started_unix_ns, now_unix_ns));
  if (process.updated_unix_ns == 0) {
    text += ", no figures published yet\n";
    return text;
  }
  text += ", updated " + format_duration(seconds_between(process.updated_unix_ns, now_unix_ns)) +
          " ago\n";
  // Tiered blocks on the host are not spills, but they hold host memory under the same limit.
  const uint64_t tiered_host = process.tiered_host_bytes();
  text += "  host: pool " + format_bytes(process.host_pool_pinned_bytes) + " pinned, " +
          format_bytes(process.host_spilled_bytes) + " spilled, " +
          (tiered_host != 0 || process.tiered.launches != 0
               ? format_bytes(tiered_host) + " in tiered blocks, "
               : std::string()) +
          "limit " + format_bytes(process.host_limit_bytes) + "\n";
  if (process.devices.empty()) {
    text += "  no device figures yet\n";
    return text;
  }
  text += kDeviceHeader;
  for (const telemetry::DeviceFigures& device : process.devices) text += device_row(device);
  text += tiered_lines(process);
  return text;
}

}  // namespace

std::string render_stats(const std::vector<telemetry::StatsSnapshot>& processes,
                         uint64_t now_unix_ns) {
  if (processes.empty()) return "no processes under vramspill\n";
  std::string text = std::to_string(processes.size()) +
                     (processes.size() == 1 ? " process" : " processes") + " under vramspill\n";
  for (const telemetry::StatsSnapshot& process : processes) {
    text += '\n';  // appended apart: GCC 12's false -Wrestrict on "literal" + std::string&&
    text += process_block(process, now_unix_ns);
  }
  return text;
}

}  // namespace vramspill::cli
