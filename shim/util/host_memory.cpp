#include "util/host_memory.h"

#include <algorithm>
#include <cstdio>

namespace vramspill {

std::optional<uint64_t> meminfo_bytes(std::string_view root, std::string_view key) {
  // stdio rather than iostreams: this runs inside the shim's initialisation, in every process.
  const std::string path = std::string(root) + "/proc/meminfo";
  std::FILE* meminfo = std::fopen(path.c_str(), "re");
  if (meminfo == nullptr) return std::nullopt;
  std::optional<uint64_t> bytes;
  char line[256];
  while (std::fgets(line, sizeof line, meminfo) != nullptr) {
    const std::string_view text = line;
    unsigned long long kib = 0;
    if (text.starts_with(key) && text.size() > key.size() && text[key.size()] == ':' &&
        std::sscanf(line + key.size(), ": %llu kB", &kib) == 1) {
      bytes = uint64_t{kib} * 1024;
      break;
    }
  }
  std::fclose(meminfo);
  return bytes;
}

std::optional<uint64_t> host_memory_available(std::string_view root) {
  return meminfo_bytes(root, "MemAvailable");
}

AvailableMemory::AvailableMemory(std::string_view root) noexcept {
  try {
    root_ = root;
    cgroups_ = CgroupMemory::locate(root);
  } catch (...) {  // out of memory: MemAvailable alone, as without cgroups
    cgroups_ = CgroupMemory();
  }
}

std::optional<MemoryRoom> AvailableMemory::now() const noexcept {
  std::optional<uint64_t> cgroup_room;
  try {
    cgroup_room = cgroups_.room();
  } catch (...) {  // out of memory reading the files: MemAvailable alone this time
  }
  const std::optional<uint64_t> available = host_memory_available(root_);
  if (!cgroup_room) {
    if (!available) return std::nullopt;
    return MemoryRoom{.bytes = *available, .cgroup_bound = false};
  }
  if (available && *available <= *cgroup_room) return MemoryRoom{.bytes = *available};
  return MemoryRoom{.bytes = *cgroup_room, .cgroup_bound = true};
}

}  // namespace vramspill
