#include "hooks/stats_publisher.h"

#include <pthread.h>
#include <signal.h>

#include <array>
#include <chrono>
#include <thread>

#include "telemetry/log.h"
#include "telemetry/stats_file.h"

namespace vramspill::hooks {
namespace {

using core::Route;
using core::route_index;

constexpr auto kPublishInterval = std::chrono::milliseconds(500);

constinit telemetry::StatsFile stats_file;

void publish(ShimState& shim) noexcept {
  std::array<telemetry::DeviceFigures, telemetry::kStatsMaxDevices> devices{};
  std::size_t count = 0;
  uint64_t spilled = 0;
  try {
    for (int device : shim.ledger.devices()) {
      if (count == devices.size()) break;
      const core::DeviceSnapshot d = shim.ledger.snapshot(device);
      const core::RouteSnapshot& managed = d.routes[route_index(Route::kSpillManaged)];
      const core::RouteSnapshot& host = d.routes[route_index(Route::kSpillHost)];
      devices[count++] = telemetry::DeviceFigures{
          .device = device,
          .total_bytes = d.total_bytes,
          .limit_bytes = d.limit_bytes,
          .device_bytes = d.held_bytes,
          .device_peak_bytes = d.peak_bytes,
          .spilled_managed_bytes = managed.live_bytes,
          .spilled_host_bytes = host.live_bytes,
          .spills = managed.allocations + host.allocations,
          .refused = d.refused};
      spilled += managed.live_bytes + host.live_bytes;
    }
  } catch (...) {  // devices() could not allocate: publish what was gathered
  }
  stats_file.publish(telemetry::ProcessFigures{
      .host_pool_pinned_bytes = shim.host.stats().pinned_bytes,
      .host_spilled_bytes = spilled,
      .host_limit_bytes = shim.host_budget.limit(),
      .devices = std::span<const telemetry::DeviceFigures>(devices.data(), count)});
}

}  // namespace

void start_stats_publisher(ShimState& shim) noexcept {
  if (!shim.config.log.stats || !stats_file.open_for_this_process()) return;
  publish(shim);
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);  // the new thread inherits the mask
  try {
    std::thread([&shim] {
      pthread_setname_np(pthread_self(), "vramspill-stat");
      for (;;) {
        std::this_thread::sleep_for(kPublishInterval);
        publish(shim);
      }
    }).detach();
  } catch (...) {
    logging::warn("cannot start the stats thread: `vramspill stat` shows this process's figures "
                  "from its start only");
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

void stop_stats_publisher(ShimState& shim) noexcept {
  if (!stats_file.is_open()) return;
  publish(shim);
  stats_file.remove();
}

}  // namespace vramspill::hooks
