// What the host has to spare, for the default host limit ([spill] host_limit as a percent).
#pragma once

#include <cstdint>
#include <optional>

namespace vramspill {

// MemAvailable from /proc/meminfo, in bytes: the kernel's estimate of memory available for new
// work without swapping. nullopt when it cannot be read.
std::optional<uint64_t> host_memory_available();

}  // namespace vramspill
