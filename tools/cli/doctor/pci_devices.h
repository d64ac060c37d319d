// NVIDIA GPUs as sysfs shows them (<root>/sys/bus/pci/devices/<address>/): where `vramspill
// doctor` finds GPUs when no driver loads, and, with or without one, each GPU's PCIe link and
// NUMA node.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramspill::cli::doctor {

struct PciLink {
  std::optional<double> speed_gts;  // GT/s per lane ("16.0 GT/s PCIe")
  std::optional<int> width;         // lanes
};

struct PciDevice {
  std::string address;           // "0000:41:00.0"
  std::string device_id;         // "0x2335"
  std::optional<int> numa_node;  // nullopt: unreadable or -1 (the kernel does not know)
  PciLink current;
  PciLink max;
};

// The addresses of NVIDIA (vendor 0x10de) display controllers (class 0x03xxxx), sorted.
std::vector<std::string> nvidia_gpu_addresses(std::string_view root);

// The device at `address`; nullopt unless sysfs has an NVIDIA device there.
std::optional<PciDevice> read_pci_device(std::string_view root, const std::string& address);

// The PCIe generation of a lane speed (8.0 GT/s: 3); 0 when not a known speed.
int pcie_generation(double speed_gts);

}  // namespace vramspill::cli::doctor
