// The driver's and the GPUs' checks (checks.h).
#include <cstdio>

#include "doctor/checks.h"
#include "util/bytes.h"

namespace vramspill::cli::doctor {
namespace {

constexpr const char* kDriverFix =
    "install the NVIDIA driver; in a container, start it with the GPUs (docker run --gpus all, "
    "with the NVIDIA Container Toolkit)";

Finding driver_finding(const DriverProbe& driver) {
  using Outcome = DriverProbe::Outcome;
  switch (driver.outcome) {
    case Outcome::kSkipped:
      return machine_finding("driver", Verdict::kWarn,
                             "not loaded (--driver none): the GPUs' features are not checked",
                             "run vramspill doctor without --driver none");
    case Outcome::kNotLoaded:
      return machine_finding("driver", Verdict::kBlock, "cannot load the driver: " + driver.problem,
                             kDriverFix);
    case Outcome::kFailed:
      return machine_finding(
          "driver", Verdict::kBlock, driver.library + " loaded, but " + driver.problem,
          "check the GPUs with nvidia-smi; in a container, pass them (--gpus all)");
    case Outcome::kLoaded:
      break;
  }
  char version[64];
  std::snprintf(version, sizeof version, "CUDA driver %d.%d (%d) from ", driver.version / 1000,
                driver.version % 1000 / 10, driver.version);
  return with_figures(machine_finding("driver", Verdict::kOk, version + driver.library),
                      {{"cuda_version", driver.version}});
}

Finding identity(const Gpu& gpu) {
  std::string message = gpu.name;
  if (gpu.driver) message += ", " + format_bytes(gpu.driver->total_bytes);
  message += ", PCI " + gpu.pci_address;
  if (!gpu.driver) message += " (from sysfs)";
  return with_figures(
      gpu_finding("gpu", gpu.index, Verdict::kOk, message),
      {{"memory_bytes", gpu.driver ? std::optional(gpu.driver->total_bytes) : std::nullopt}});
}

// The spill tiers (README.md, "Spilling"), VMM and pools.
void check_features(const Gpu& gpu, const DriverGpu& device, std::vector<Finding>& findings) {
  if (device.integrated) {
    findings.push_back(gpu_finding(
        "integrated", gpu.index, Verdict::kBlock,
        "an integrated GPU: its memory is host memory, so nothing spills (the budget still holds)",
        "run jobs that need spilling on a discrete GPU"));
    return;
  }
  const bool managed = device.concurrent_managed_access;
  const bool host_pool = device.unified_addressing && device.can_map_host_memory;
  if (managed) {
    findings.push_back(gpu_finding("managed", gpu.index, Verdict::kOk,
                                   "concurrent managed access: managed spills work"));
  } else {
    findings.push_back(gpu_finding(
        "managed", gpu.index, Verdict::kWarn,
        "no concurrent managed access: managed spills are off, overflow goes to the pinned host "
        "pool",
        "on a vGPU, enable unified memory in its profile; on Windows and WSL there is none"));
  }
  if (host_pool) {
    findings.push_back(gpu_finding("host-pool", gpu.index, Verdict::kOk,
                                   "unified addressing and mapped host memory: host-pool spills "
                                   "work"));
  } else if (managed) {
    findings.push_back(
        gpu_finding("host-pool", gpu.index, Verdict::kWarn,
                    "no mapped host memory with unified addressing: host-pool spills are off",
                    "use [spill] mode = \"auto\" or \"managed\" on this GPU"));
  } else {
    findings.push_back(
        gpu_finding("host-pool", gpu.index, Verdict::kBlock,
                    "neither concurrent managed access nor mapped host memory: no spill tier works",
                    "use a discrete GPU on 64-bit Linux (Pascal or later for managed spills)"));
  }
  if (device.virtual_memory_management && device.host_virtual_memory_management) {
    findings.push_back(gpu_finding("vmm", gpu.index, Verdict::kOk,
                                   "virtual memory management with host-located memory"));
  } else {
    findings.push_back(gpu_finding(
        "vmm", gpu.index, Verdict::kWarn,
        device.virtual_memory_management
            ? "virtual memory management without host-located memory: the tiered mode (to come) "
              "cannot evict to host memory"
            : "no virtual memory management: cuMemCreate fails, and the tiered mode (to come) "
              "cannot run",
        "update the NVIDIA driver"));
  }
  if (device.memory_pools) {
    findings.push_back(
        gpu_finding("pools", gpu.index, Verdict::kOk, "memory pools: cuMemAllocAsync works"));
  } else {
    findings.push_back(gpu_finding(
        "pools", gpu.index, Verdict::kWarn,
        "no memory pools: cuMemAllocAsync fails (PyTorch's cudaMallocAsync backend needs it)",
        "update the NVIDIA driver (pools need CUDA 11.2 or later)"));
  }
}

// "Gen5 x16"; the lane speed itself where it is no known generation.
std::string link_name(double speed_gts, int width) {
  char text[48];
  const int generation = pcie_generation(speed_gts);
  if (generation > 0)
    std::snprintf(text, sizeof text, "Gen%d x%d", generation, width);
  else
    std::snprintf(text, sizeof text, "%.1f GT/s x%d", speed_gts, width);
  return text;
}

Finding check_link(const Gpu& gpu) {
  const std::string lspci = "lspci -vv -s " + gpu.pci_address;
  if (!gpu.pci) {
    return gpu_finding("pcie", gpu.index, Verdict::kWarn,
                       "no NVIDIA device " + gpu.pci_address +
                           " in /sys/bus/pci/devices: PCIe link and NUMA node unknown",
                       "check the GPU with " + lspci + " (a container may hide /sys)");
  }
  const PciLink& now = gpu.pci->current;
  const PciLink& max = gpu.pci->max;
  if (!now.speed_gts || !now.width || !max.speed_gts || !max.width) {
    return gpu_finding("pcie", gpu.index, Verdict::kWarn, "sysfs does not report the PCIe link",
                       "check it with " + lspci);
  }
  const std::string capable = link_name(*max.speed_gts, *max.width);
  if (*now.width < *max.width) {
    return gpu_finding("pcie", gpu.index, Verdict::kWarn,
                       "PCIe link " + link_name(*now.speed_gts, *now.width) + " of " + capable +
                           ": spills cross it at a fraction of its bandwidth",
                       "reseat the GPU or move it to a slot wired for x" +
                           std::to_string(*max.width) + " (LnkSta in " + lspci + ")");
  }
  std::string message = "PCIe " + capable;
  if (*now.speed_gts < *max.speed_gts)
    message += " (" + link_name(*now.speed_gts, *now.width) + " now: an idle GPU slows its link)";
  return gpu_finding("pcie", gpu.index, Verdict::kOk, message);
}

const NumaNode* find_node(const HostFacts& host, int id) {
  for (const NumaNode& node : host.numa_nodes)
    if (node.id == id) return &node;
  return nullptr;
}

void check_numa(const std::vector<Gpu>& gpus, const HostFacts& host,
                std::vector<Finding>& findings) {
  // No value when sysfs lists no node.
  const std::vector<Figure> counted = {{"numa_nodes", host.numa_nodes.empty()
                                                          ? std::nullopt
                                                          : std::optional(host.numa_nodes.size())}};
  if (host.numa_nodes.size() < 2) {
    findings.push_back(with_figures(
        machine_finding(
            "numa", Verdict::kOk,
            gpus.empty() ? "one NUMA node" : "one NUMA node: every GPU is near all of host memory"),
        counted));
    return;
  }
  std::string nodes = std::to_string(host.numa_nodes.size()) + " NUMA nodes:";
  for (const NumaNode& node : host.numa_nodes)
    nodes += " node " + std::to_string(node.id) + " " +
             (node.mem_total ? format_bytes(*node.mem_total) : std::string("?")) +
             (&node == &host.numa_nodes.back() ? "" : ",");
  findings.push_back(with_figures(machine_finding("numa", Verdict::kOk, nodes), counted));
  for (const Gpu& gpu : gpus) {
    if (!gpu.pci) continue;  // the pcie finding says so
    if (!gpu.pci->numa_node) {
      findings.push_back(gpu_finding(
          "numa", gpu.index, Verdict::kWarn,
          "the kernel does not know its NUMA node (numa_node -1): the host pool cannot pin "
          "memory near it",
          "enable NUMA (ACPI SRAT) in the firmware; in a VM, give it a NUMA topology"));
      continue;
    }
    const int id = *gpu.pci->numa_node;
    const NumaNode* node = find_node(host, id);
    const std::string name = "node " + std::to_string(id);
    if (node != nullptr && node->mem_total && gpu.driver &&
        *node->mem_total < gpu.driver->total_bytes) {
      findings.push_back(with_figures(
          gpu_finding("numa", gpu.index, Verdict::kWarn,
                      "attached to " + name + ", which has " + format_bytes(*node->mem_total) +
                          ", less than its " + format_bytes(gpu.driver->total_bytes) +
                          ": spills beyond that are pinned on another node, across the socket link",
                      "add memory to " + name + ", or run the job on a GPU of a node with more"),
          {{"numa_node", id}, {"numa_node_memory_bytes", node->mem_total}}));
      continue;
    }
    findings.push_back(with_figures(
        gpu_finding("numa", gpu.index, Verdict::kOk, "attached to " + name), {{"numa_node", id}}));
  }
}

}  // namespace

void check_gpus(const DriverProbe& driver, const std::vector<Gpu>& gpus, const HostFacts& host,
                std::vector<Finding>& findings) {
  findings.push_back(driver_finding(driver));
  if (gpus.empty()) {
    findings.push_back(machine_finding(
        "gpu", Verdict::kBlock,
        driver.outcome == DriverProbe::Outcome::kLoaded ? "the driver reports no GPU"
                                                        : "no NVIDIA GPU in /sys/bus/pci/devices",
        "check the GPUs with nvidia-smi; in a container, pass them (docker run --gpus all)"));
  }
  for (const Gpu& gpu : gpus) {
    findings.push_back(identity(gpu));
    if (gpu.driver) check_features(gpu, *gpu.driver, findings);
    const PciLink unknown;
    const PciDevice* pci = gpu.pci ? &*gpu.pci : nullptr;
    findings.push_back(
        with_figures(check_link(gpu), {{"pcie_speed_gts", (pci ? pci->current : unknown).speed_gts},
                                       {"pcie_width", (pci ? pci->current : unknown).width},
                                       {"pcie_max_speed_gts", (pci ? pci->max : unknown).speed_gts},
                                       {"pcie_max_width", (pci ? pci->max : unknown).width}}));
  }
  check_numa(gpus, host, findings);
}

}  // namespace vramspill::cli::doctor
