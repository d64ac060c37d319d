#include "util/host_memory.h"

#include <cstdio>

namespace vramspill {

std::optional<uint64_t> host_memory_available() {
  // stdio rather than iostreams: this runs inside the shim's initialisation, in every process.
  std::FILE* meminfo = std::fopen("/proc/meminfo", "re");
  if (meminfo == nullptr) return std::nullopt;
  std::optional<uint64_t> bytes;
  char line[256];
  while (std::fgets(line, sizeof line, meminfo) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      bytes = uint64_t{kib} * 1024;
      break;
    }
  }
  std::fclose(meminfo);
  return bytes;
}

}  // namespace vramspill
