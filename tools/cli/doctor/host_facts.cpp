#include "doctor/host_facts.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <sstream>

#include "doctor/text_files.h"
#include "util/cgroup_memory.h"
#include "util/host_memory.h"

namespace vramspill::cli::doctor {
namespace {

MemlockLimit memlock_limit() {
  rlimit limit{};
  // As the shim reads it (shim/tiers/host_tier.cpp): no answer counts as no limit.
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::nullopt;
  return limit.rlim_cur;
}

// A tmpfs size= option: "65536k" (how the kernel prints it), or bytes with m, g or % of MemTotal.
std::optional<uint64_t> tmpfs_size(std::string_view text, std::optional<uint64_t> mem_total) {
  uint64_t number = 0;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error != std::errc()) return std::nullopt;
  const std::string_view unit(stop, static_cast<std::size_t>(text.data() + text.size() - stop));
  if (unit.empty()) return number;
  if (unit == "k" || unit == "K") return number << 10;
  if (unit == "m" || unit == "M") return number << 20;
  if (unit == "g" || unit == "G") return number << 30;
  if (unit == "%" && mem_total) return *mem_total / 100 * number;
  return std::nullopt;
}

// Note [Where doctor reads the size of /dev/shm]
SharedMemory shared_memory(const std::string& root, std::optional<uint64_t> mem_total) {
  SharedMemory shm;
  const std::optional<std::string> mounts = read_text_file(root + "/proc/self/mounts");
  if (!mounts) return shm;
  std::istringstream lines(*mounts);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string source, point, type, options;
    if (!(fields >> source >> point >> type >> options) || point != "/dev/shm") continue;
    shm = SharedMemory{.mounted = true, .type = type, .bytes = std::nullopt};
    if (type != "tmpfs") continue;
    shm.bytes = mem_total ? std::optional<uint64_t>(*mem_total / 2) : std::nullopt;
    std::istringstream option_list(options);
    std::string option;
    while (std::getline(option_list, option, ','))
      if (option.starts_with("size=")) shm.bytes = tmpfs_size(option.substr(5), mem_total);
  }
  return shm;
}

// The selected mode of a sysfs choice file: "always [madvise] never" -> "madvise".
std::optional<std::string> selected_mode(const std::string& path) {
  const std::optional<std::string> text = read_text_file(path);
  if (!text) return std::nullopt;
  const std::size_t open = text->find('[');
  const std::size_t close = text->find(']', open);
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  return text->substr(open + 1, close - open - 1);
}

// "Node 1 MemTotal:       16314548 kB" in a node's meminfo.
std::optional<uint64_t> node_mem_total(const std::string& meminfo_path) {
  const std::optional<std::string> text = read_text_file(meminfo_path);
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string node, id, key;
    unsigned long long kib = 0;
    if (fields >> node >> id >> key >> kib && key == "MemTotal:") return uint64_t{kib} << 10;
  }
  return std::nullopt;
}

std::vector<NumaNode> numa_nodes(const std::string& root) {
  std::vector<NumaNode> nodes;
  std::error_code error;
  const std::filesystem::path directory = root + "/sys/devices/system/node";
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    int id = 0;
    const char* end = name.data() + name.size();
    if (!name.starts_with("node")) continue;
    const auto [stop, parse_error] = std::from_chars(name.data() + 4, end, id);
    if (parse_error != std::errc() || stop != end) continue;
    nodes.push_back({.id = id, .mem_total = node_mem_total(entry.path() / "meminfo")});
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return nodes;
}

}  // namespace

HostFacts read_host_facts(std::string_view root, std::optional<MemlockLimit> memlock) {
  const std::string prefix(root);
  HostFacts facts;
  facts.mem_total = meminfo_bytes(root, "MemTotal");
  facts.mem_available = host_memory_available(root);
  facts.swap_total = meminfo_bytes(root, "SwapTotal");
  const CgroupMemory cgroups = CgroupMemory::locate(root);
  for (const std::string& group : cgroups.groups())  // as the machine names them, without `root`
    facts.cgroups.push_back(group.substr(prefix.size()));
  facts.cgroup_room = cgroups.room();
  facts.memlock = memlock ? *memlock : memlock_limit();
  facts.shm = shared_memory(prefix, facts.mem_total);
  const std::optional<long long> swappiness = read_integer_file(prefix + "/proc/sys/vm/swappiness");
  if (swappiness) facts.swappiness = static_cast<int>(*swappiness);
  facts.thp_mode = selected_mode(prefix + "/sys/kernel/mm/transparent_hugepage/enabled");
  facts.numa_nodes = numa_nodes(prefix);
  return facts;
}

}  // namespace vramspill::cli::doctor
