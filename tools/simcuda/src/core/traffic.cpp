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
    return migration + device_seconds(device, managed_bytes_on_device(allocation, address, size,
                                                                      device.ordinal()));
  }
  const uint64_t on_device =
      managed_bytes_on_device(allocation, address, size, device.ordinal());
  return device_seconds(device, on_device) + link_seconds(device, engine, size - on_device);
}

// A kernel's range may be sized "to the end of memory" (a count too large to multiply out).
uint64_t end_of(uint64_t address, uint64_t size) {
  return size > UINT64_MAX - address ? UINT64_MAX : address + size;
}

// Calls visit(allocation, address, bytes) for each allocation's piece of [address, end), in
// order, up to the first address no allocation holds, which it returns (`end` if none).
template <typename Visit>
uint64_t for_each_piece(uint64_t address, uint64_t end, Visit visit) {
  Driver& driver = *Driver::instance();
  uint64_t at = address;
  while (at < end) {
    const std::optional<Allocation> found = driver.allocations().find_containing(at);
    if (!found) break;
    const uint64_t piece = std::min(end, found->base + found->mapped) - at;
    visit(*found, at, piece);
    at += piece;
  }
  return at;
}

}  // namespace

// Note [A range is charged mapping by mapping]
double account_access(Device& device, Engine engine, uint64_t address, uint64_t size,
                      Access access) {
  double seconds = 0.0;
  const uint64_t end = end_of(address, size);
  const uint64_t stopped =
      for_each_piece(address, end, [&](const Allocation& found, uint64_t at, uint64_t piece) {
        seconds += account_allocation(device, engine, found, at, piece, access);
      });
  // In the device's address span with no allocation there (reserved and unmapped, or freed):
  // the access faults there, and nothing from there on moves. Memory the driver does not know
  // (pageable host memory) is reached over the link.
  if (stopped < end && !Driver::instance()->addresses().contains(stopped))
    seconds += link_seconds(device, engine, end - stopped);
  return seconds;
}

// Note [Waiting for a prefetch] in managed.cpp
double prefetched_arrival(const Device& device, uint64_t address, uint64_t size) {
  double latest = 0.0;
  for_each_piece(address, end_of(address, size),
                 [&](const Allocation& found, uint64_t at, uint64_t piece) {
                   if (found.kind == MemoryKind::kManaged && !found.host_located)
                     latest = std::max(latest, managed_arrival(found, at, piece, device.ordinal()));
                 });
  return latest;
}

}  // namespace simcuda
