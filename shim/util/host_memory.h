// What the host, and this process's memory cgroups, have to spare: what the default host limit
// ([spill] host_limit as a percent) is a percent of.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "util/cgroup_memory.h"

namespace vramspill {

// The `root` of a real system: the paths are read as they are. Tests pass a fake tree instead.
inline constexpr std::string_view kSystemRoot = "";

// The line `key` ("MemTotal", "SwapTotal", ...) of <root>/proc/meminfo, in bytes; nullopt when it
// cannot be read.
std::optional<uint64_t> meminfo_bytes(std::string_view root, std::string_view key);

// MemAvailable from <root>/proc/meminfo, in bytes: the kernel's estimate of memory available for
// new work without swapping. nullopt when it cannot be read.
std::optional<uint64_t> host_memory_available(std::string_view root);

// Memory this process can still take, read now.
struct MemoryRoom {
  uint64_t bytes = 0;
  bool cgroup_bound = false;  // a memory cgroup leaves less than MemAvailable (or it is unreadable)
};

class AvailableMemory {
 public:
  // Finds the process's memory cgroups once (Note [Memory a cgroup leaves] in
  // util/cgroup_memory.h): a process stays in its group. `root` as for CgroupMemory::locate.
  explicit AvailableMemory(std::string_view root) noexcept;

  // The smaller of MemAvailable and the cgroups' room; nullopt when neither can be read.
  std::optional<MemoryRoom> now() const noexcept;

  const CgroupMemory& cgroups() const { return cgroups_; }

 private:
  std::string root_;
  CgroupMemory cgroups_;
};

}  // namespace vramspill
