#include "hooks/stats_publisher.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>

#include "telemetry/log.h"
#include "telemetry/stats_file.h"
#include "util/quiet_thread.h"

namespace vramspill::hooks {
namespace {

using core::Route;
using core::route_index;

constexpr auto kPublishInterval = std::chrono::milliseconds(500);

constinit telemetry::StatsFile stats_file;

void publish(ShimState& shim) noexcept {
  shim.trace.flush();  // Note [A trace never stops the job]
  refresh_host_limit(shim);  // the limit shown follows the memory available, spills or not
  std::array<telemetry::DeviceFigures, telemetry::kStatsMaxDevices> devices{};
  std::size_t count = 0;
  uint64_t spilled = 0;
  try {
    for (int device : shim.ledger.devices()) {
      if (count == devices.size()) break;
      const core::DeviceSnapshot d = shim.ledger.snapshot(device);
      const core::RouteSnapshot& managed = d.routes[route_index(Route::kSpillManaged)];
      const core::RouteSnapshot& host = d.routes[route_index(Route::kSpillHost)];
      // Host-located VMM handles are pinned host memory too: shown with the host pool's blocks.
      const core::RouteSnapshot& vmm_host = d.routes[route_index(Route::kSpillVmmHost)];
      const uint64_t spills = managed.allocations + host.allocations + vmm_host.allocations;
      const uint64_t spilled_host = host.live_bytes + vmm_host.live_bytes;
      devices[count++] = telemetry::DeviceFigures{
          .device = device,
          .total_bytes = d.total_bytes,
          .limit_bytes = d.limit_bytes,
          .device_bytes = d.held_bytes,
          .device_peak_bytes = d.peak_bytes,
          .spilled_managed_bytes = managed.live_bytes,
          .spilled_host_bytes = spilled_host,
          .spills = spills,
          // Refused and not spilled: these failed with OUT_OF_MEMORY.
          .refused = d.refused()};
      // A device's tiered blocks may be the remap mover's and the prefetch mover's at once
      // (the prefetch mover hands what it cannot hold to the remap mover): both count.
      telemetry::DeviceFigures& figures = devices[count - 1];
      if (const tiers::GranuleArena* arena = shim.tiered.arena_of(device)) {
        const tiers::ArenaStats held = arena->stats();
        figures.tiered_device_bytes = held.device_granules * tiers::kGranuleBytes;
        figures.tiered_host_bytes = held.host_granules * tiers::kGranuleBytes;
      }
      const placement::PrefetchPlacement::Held prefetched = shim.prefetch.held(device);
      figures.tiered_device_bytes += prefetched.device_bytes;
      figures.tiered_host_bytes += prefetched.host_bytes;
      spilled += managed.live_bytes + spilled_host;
    }
  } catch (...) {  // devices() could not allocate: publish what was gathered
  }
  const placement::TieredStats moved = shim.tiered.stats();
  const placement::PrefetchStats prefetched = shim.prefetch.stats();
  const core::LaunchCounts launches = shim.use.launch_counts();
  uint64_t move_vmm_calls = 0;
  for (int device : shim.ledger.devices()) {
    if (const tiers::GranuleArena* arena = shim.tiered.arena_of(device))
      move_vmm_calls += arena->stats().move_vmm_calls;
  }
  stats_file.publish(telemetry::ProcessFigures{
      .host_pool_pinned_bytes = shim.host.stats().pinned_bytes,
      .host_spilled_bytes = spilled,
      .host_limit_bytes = shim.host_budget.limit(),
      .tiered = {.evicted_bytes =
                     moved.evicted_granules * tiers::kGranuleBytes + prefetched.evicted_bytes,
                 .promoted_bytes =
                     moved.promoted_granules * tiers::kGranuleBytes + prefetched.promoted_bytes,
                 .windows = moved.windows,
                 .window_ns = moved.window_nanoseconds,
                 .launches = launches.launches,
                 .unreadable_launches = launches.unreadable,
                 .move_vmm_calls = move_vmm_calls},
      .devices = std::span<const telemetry::DeviceFigures>(devices.data(), count)});
}

}  // namespace

// Note [A thread started before the program can fork]
// The shim initialises inside the program's first driver call, and a program may fork right
// after it returns (the lifecycle tests do). A thread still starting up at that moment can hold
// locks of the C library's or a sanitizer runtime's thread bookkeeping, which the child then
// inherits held, and the child hangs at its exit. So the first driver call returns only once the
// thread runs its own code.
void start_stats_publisher(ShimState& shim) noexcept {
  if (!shim.config.log.stats || !stats_file.open_for_this_process()) return;
  publish(shim);
  std::atomic<bool> running{false};
  try {
    start_quiet_thread("vramspill-stat", [&shim, &running] {
      running.store(true, std::memory_order_release);  // `running` is gone after this
      for (;;) {
        std::this_thread::sleep_for(kPublishInterval);
        publish(shim);
      }
    }).detach();
    // Note [A thread started before the program can fork]
    while (!running.load(std::memory_order_acquire)) std::this_thread::yield();
  } catch (...) {
    logging::warn("cannot start the stats thread: `vramspill stat` shows this process's figures "
                  "from its start only");
  }
}

void stop_stats_publisher(ShimState& shim) noexcept {
  if (!stats_file.is_open()) return;
  publish(shim);
  stats_file.remove();
}

}  // namespace vramspill::hooks
