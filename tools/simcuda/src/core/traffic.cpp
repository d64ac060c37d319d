#include "core/traffic.h"

#include "core/device.h"
#include "core/driver.h"
#include "core/managed.h"

namespace simcuda {
namespace {

double device_seconds(Device& device, uint64_t bytes) {
  device.counters().device_bytes_touched.fetch_add(bytes, std::memory_order_relaxed);
  return static_cast<double>(bytes) / Driver::instance()->config().cost.hbm_bytes_per_second;
}

double link_seconds(Device& device, Engine engine, uint64_t bytes) {
  auto& counter = engine == Engine::kCopy ? device.counters().link_bytes_copies
                                          : device.counters().link_bytes_zero_copy;
  counter.fetch_add(bytes, std::memory_order_relaxed);
  return static_cast<double>(bytes) / Driver::instance()->config().cost.link_bytes_per_second;
}

}  // namespace

double account_access(Device& device, Engine engine, uint64_t address, uint64_t size,
                      Access /*access*/) {
  if (size == 0) return 0.0;
  const std::optional<Allocation> found = Driver::instance()->allocations().find_containing(address);
  if (!found || found->host_located) return link_seconds(device, engine, size);
  if (found->kind != MemoryKind::kManaged) return device_seconds(device, size);
  if (engine == Engine::kKernel) {
    // Pages the migration left on the host (zero-copy by advice, or no evictable VRAM) were
    // charged as link traffic by it; only the device-resident rest costs HBM time.
    const double migration = migrate_managed_for_device_access(device, *found, address, size);
    return migration + device_seconds(device, managed_bytes_on_device(*found, address, size));
  }
  const uint64_t on_device = managed_bytes_on_device(*found, address, size);
  return device_seconds(device, on_device) + link_seconds(device, engine, size - on_device);
}

}  // namespace simcuda
