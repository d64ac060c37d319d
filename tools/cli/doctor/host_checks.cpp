// The host's checks (checks.h).
#include <algorithm>
#include <cstdio>

#include "doctor/checks.h"
#include "util/bytes.h"

namespace vramspill::cli::doctor {
namespace {

// Less room than this for spills blocks them: what the pinned host pool keeps pinned once grown
// ([spill] host_pool_keep's default), the least that makes spilling worth its cost.
constexpr uint64_t kLeastSpillRoom = uint64_t{1} << 30;
// Training keeps optimizer state, checkpoints and data in host memory besides what spills.
constexpr double kTrainingRatio = 1.5;
// Swapping is rare enough at this level that the job's memory stays put.
constexpr int kMostSwappiness = 10;
// PyTorch's DataLoader workers and NCCL's shared-memory transport need at least this.
constexpr uint64_t kLeastSharedMemory = uint64_t{1} << 30;

constexpr const char* kProcFix = "check that /proc is mounted (and readable) here";
constexpr const char* kCgroupFix =
    "raise the container's memory limit (docker run --memory, Kubernetes "
    "resources.limits.memory)";
constexpr const char* kMemlockFix =
    "raise the locked-memory limit (docker run --ulimit memlock=-1, ulimit -l unlimited, "
    "systemd LimitMEMLOCK=infinity), or give [spill] host_limit as a size, which replaces it";
constexpr const char* kSharedMemoryFix =
    "docker run --shm-size=8g (or --ipc=host); in Kubernetes, an emptyDir with medium: Memory "
    "on /dev/shm";

Finding check_host_ram(const HostFacts& host, std::optional<uint64_t> device_memory) {
  if (!host.mem_total)
    return machine_finding("host-ram", Verdict::kWarn, "cannot read MemTotal in /proc/meminfo",
                           kProcFix);
  const std::string ram = format_bytes(*host.mem_total) + " of RAM";
  if (!device_memory || *device_memory == 0)
    return machine_finding("host-ram", Verdict::kOk,
                           ram + " (device memory unknown without the driver)");
  const double ratio = static_cast<double>(*host.mem_total) / static_cast<double>(*device_memory);
  char figures[96];
  std::snprintf(figures, sizeof figures, " for %s of device memory (%.1fx)",
                format_bytes(*device_memory).c_str(), ratio);
  if (ratio >= kTrainingRatio) return machine_finding("host-ram", Verdict::kOk, ram + figures);
  return machine_finding(
      "host-ram", Verdict::kWarn,
      ram + figures +
          (ratio < 1.0 ? ": less RAM than device memory leaves spills little room"
                       : ": training wants 1.5x or more, and more with optimizer offload"),
      "add host memory: 1.5x the device memory for training, more with offload");
}

Finding check_available(const HostFacts& host, std::optional<uint64_t> device_memory) {
  if (!host.mem_available)
    return machine_finding("mem-available", Verdict::kWarn,
                           "cannot read MemAvailable in /proc/meminfo", kProcFix);
  const std::string available = format_bytes(*host.mem_available) + " available";
  if (*host.mem_available < kLeastSpillRoom)
    return machine_finding("mem-available", Verdict::kBlock,
                           "only " + available + ": spills have no room",
                           "free host memory (other jobs, files in tmpfs), or add memory");
  if (device_memory && *host.mem_available < *device_memory)
    return machine_finding("mem-available", Verdict::kWarn,
                           available + ", less than the " + format_bytes(*device_memory) +
                               " of device memory (spills may take half of it by default)",
                           "free host memory, or give [spill] host_limit as a size");
  return machine_finding("mem-available", Verdict::kOk,
                         available + " (spills may take half of it by default)");
}

Finding check_cgroup(const HostFacts& host, std::optional<uint64_t> device_memory) {
  if (host.cgroups.empty())
    return machine_finding("cgroup", Verdict::kOk, "no memory cgroup: no container memory limit");
  const std::string& group = host.cgroups.front();
  if (!host.cgroup_room)
    return machine_finding("cgroup", Verdict::kOk, group + ": no memory limit");
  const std::string leaves =
      group + " leaves " + format_bytes(*host.cgroup_room) + " under its memory limit";
  if (*host.cgroup_room < kLeastSpillRoom)
    return machine_finding("cgroup", Verdict::kBlock, leaves + ": spills have no room", kCgroupFix);
  if (device_memory && *host.cgroup_room < *device_memory)
    return machine_finding(
        "cgroup", Verdict::kWarn,
        leaves + ", less than the " + format_bytes(*device_memory) + " of device memory",
        kCgroupFix);
  return machine_finding("cgroup", Verdict::kOk, leaves);
}

// The first GPU whose only spill tier is the pinned host pool, if any.
const Gpu* gpu_without_managed_spills(const std::vector<Gpu>& gpus) {
  const auto host_pool_only = [](const Gpu& gpu) {
    return gpu.driver && !gpu.driver->integrated && !gpu.driver->concurrent_managed_access;
  };
  const auto found = std::find_if(gpus.begin(), gpus.end(), host_pool_only);
  return found == gpus.end() ? nullptr : &*found;
}

// Note [RLIMIT_MEMLOCK and the host limit] in shim/tiers/host_tier.cpp: with the default host
// limit, half the memory available, pinned memory also stays under RLIMIT_MEMLOCK.
Finding check_memlock(const HostFacts& host, const std::vector<Gpu>& gpus) {
  if (!host.memlock) return machine_finding("memlock", Verdict::kOk, "RLIMIT_MEMLOCK unlimited");
  const std::string limit = "RLIMIT_MEMLOCK " + format_bytes(*host.memlock);
  std::optional<uint64_t> available = host.mem_available;
  if (available && host.cgroup_room) available = std::min(*available, *host.cgroup_room);
  if (available && *host.memlock >= *available / 2)
    return machine_finding(
        "memlock", Verdict::kOk,
        limit + ", no less than the default host limit (" + format_bytes(*available / 2) + ")");
  const Gpu* host_pool_only = gpu_without_managed_spills(gpus);
  if (*host.memlock < kLeastSpillRoom && host_pool_only != nullptr)
    return machine_finding("memlock", Verdict::kBlock,
                           limit + ": gpu " + std::to_string(host_pool_only->index) +
                               " spills only to the pinned host pool, which may pin no more",
                           kMemlockFix);
  return machine_finding("memlock", Verdict::kWarn,
                         limit + ": host-pool spills stop there (managed spills do not count)",
                         kMemlockFix);
}

// Note [Where doctor reads the size of /dev/shm] in host_facts.h.
Finding check_shared_memory(const HostFacts& host) {
  if (!host.shm.mounted)
    return machine_finding("shm", Verdict::kWarn, "/dev/shm is not a mount point",
                           kSharedMemoryFix);
  if (host.shm.type != "tmpfs")
    return machine_finding("shm", Verdict::kWarn, "/dev/shm is " + host.shm.type + ", not tmpfs",
                           kSharedMemoryFix);
  if (!host.shm.bytes)
    return machine_finding("shm", Verdict::kWarn, "cannot tell the size of /dev/shm",
                           kSharedMemoryFix);
  const std::string size = "/dev/shm holds " + format_bytes(*host.shm.bytes);
  if (*host.shm.bytes < kLeastSharedMemory)
    return machine_finding("shm", Verdict::kWarn,
                           size + ": PyTorch's DataLoader workers and NCCL need more",
                           kSharedMemoryFix);
  return machine_finding("shm", Verdict::kOk, size);
}

Finding check_swappiness(const HostFacts& host) {
  if (!host.swappiness)
    return machine_finding("swappiness", Verdict::kWarn, "cannot read /proc/sys/vm/swappiness",
                           kProcFix);
  const std::string setting = "vm.swappiness " + std::to_string(*host.swappiness);
  if (!host.swap_total || *host.swap_total == 0)
    return machine_finding("swappiness", Verdict::kOk, setting + ", no swap");
  if (*host.swappiness <= kMostSwappiness)
    return machine_finding("swappiness", Verdict::kOk, setting);
  return machine_finding(
      "swappiness", Verdict::kWarn,
      setting + " with " + format_bytes(*host.swap_total) +
          " of swap: under memory pressure the kernel swaps out managed spills, and GPU page "
          "faults then wait for the disk",
      "sysctl -w vm.swappiness=10 (and in /etc/sysctl.d/ to keep it)");
}

Finding check_huge_pages(const HostFacts& host) {
  if (!host.thp_mode)
    return machine_finding("thp", Verdict::kOk, "transparent huge pages: not in this kernel");
  const std::string mode = "transparent huge pages: " + *host.thp_mode;
  if (*host.thp_mode != "never") return machine_finding("thp", Verdict::kOk, mode);
  return machine_finding(
      "thp", Verdict::kWarn,
      mode + ": host memory the GPU reaches through HMM or ATS is mapped in 4 KiB pages",
      "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
}

}  // namespace

void check_host(const HostFacts& host, const std::vector<Gpu>& gpus,
                std::vector<Finding>& findings) {
  const std::optional<uint64_t> device_memory = total_device_memory(gpus);
  findings.push_back(
      with_figures(check_host_ram(host, device_memory),
                   {{"mem_total_bytes", host.mem_total}, {"device_memory_bytes", device_memory}}));
  findings.push_back(with_figures(check_available(host, device_memory),
                                  {{"mem_available_bytes", host.mem_available}}));
  findings.push_back(
      with_figures(check_cgroup(host, device_memory), {{"cgroup_room_bytes", host.cgroup_room}}));
  // No value: unlimited.
  findings.push_back(with_figures(check_memlock(host, gpus), {{"memlock_bytes", host.memlock}}));
  findings.push_back(with_figures(check_shared_memory(host), {{"shm_bytes", host.shm.bytes}}));
  findings.push_back(with_figures(
      check_swappiness(host), {{"swappiness", host.swappiness}, {"swap_bytes", host.swap_total}}));
  findings.push_back(check_huge_pages(host));
}

}  // namespace vramspill::cli::doctor
