// What `vramspill doctor` reads about the host, all of it below a root directory ("" on a real
// system, a fake tree in the tests): memory, the memory cgroup, locked-memory limit, /dev/shm,
// swapping, transparent huge pages and NUMA nodes. Reading only; the verdicts are in checks.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramspill::cli::doctor {

// RLIMIT_MEMLOCK's soft limit; nullopt: unlimited.
using MemlockLimit = std::optional<uint64_t>;

// Note [Where doctor reads the size of /dev/shm]
// The size of /dev/shm is the size= option of its tmpfs mount in <root>/proc/self/mounts (the
// last mount on /dev/shm wins; without size= a tmpfs holds half of MemTotal; the kernel prints the
// size in KiB, and sizes with m, g or % are read too). statvfs would read the real filesystem
// under a fake root, which a test cannot arrange; the mount table is what Docker's --shm-size and
// Kubernetes' emptyDir set, and it can be faked.
struct SharedMemory {
  bool mounted = false;           // /dev/shm is a mount point
  std::string type;               // its filesystem type ("tmpfs")
  std::optional<uint64_t> bytes;  // its size, when a tmpfs
};

struct NumaNode {
  int id = 0;
  std::optional<uint64_t> mem_total;
};

struct HostFacts {
  std::optional<uint64_t> mem_total;
  std::optional<uint64_t> mem_available;
  std::optional<uint64_t> swap_total;
  std::vector<std::string> cgroups;     // the memory cgroups, innermost first; empty: none
  std::optional<uint64_t> cgroup_room;  // what their limits leave; nullopt: no limit
  MemlockLimit memlock;
  SharedMemory shm;
  std::optional<int> swappiness;
  std::optional<std::string> thp_mode;  // "always", "madvise" or "never"; nullopt: no THP file
  std::vector<NumaNode> numa_nodes;     // by id
};

// Reads the facts below `root`; `memlock` replaces getrlimit's answer when set (for tests).
HostFacts read_host_facts(std::string_view root, std::optional<MemlockLimit> memlock);

}  // namespace vramspill::cli::doctor
