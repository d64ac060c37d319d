#include "core/traffic.h"

#include <algorithm>

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

// `size` bytes from `address`, all inside `allocation`.
double account_allocation(Device& device, Engine engine, const Allocation& allocation,
                          uint64_t address, uint64_t size, Access /*access*/) {
  if (allocation.host_located) return link_seconds(device, engine, size);
  if (allocation.kind != MemoryKind::kManaged) return device_seconds(device, size);
  if (engine == Engine::kKernel) {
    // Pages the migration left on the host (zero-copy by advice, or no evictable VRAM) were
    // charged as link traffic by it; only the device-resident rest costs HBM time.
    const double migration = migrate_managed_for_device_access(device, allocation, address, size);
    return migration + device_seconds(device, managed_bytes_on_device(allocation, address, size));
  }
  const uint64_t on_device = managed_bytes_on_device(allocation, address, size);
  return device_seconds(device, on_device) + link_seconds(device, engine, size - on_device);
}

}  // namespace

// Note [A range is charged mapping by mapping]
double account_access(Device& device, Engine engine, uint64_t address, uint64_t size,
                      Access access) {
  Driver& driver = *Driver::instance();
  double seconds = 0.0;
  // A kernel's range may be sized "to the end of memory" (a count too large to multiply out).
  const uint64_t end = size > UINT64_MAX - address ? UINT64_MAX : address + size;
  for (uint64_t at = address; at < end;) {
    const std::optional<Allocation> found = driver.allocations().find_containing(at);
    if (!found) {
      // In the device's address span with no allocation there (reserved and unmapped, or
      // freed): the access faults there, and nothing from there on moves.
      if (driver.addresses().contains(at)) break;
      // Memory the driver does not know (pageable host memory) is reached over the link.
      return seconds + link_seconds(device, engine, end - at);
    }
    const uint64_t piece = std::min(end, found->base + found->mapped) - at;
    seconds += account_allocation(device, engine, *found, at, piece, access);
    at += piece;
  }
  return seconds;
}

}  // namespace simcuda
