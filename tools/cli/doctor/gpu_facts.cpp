#include "doctor/gpu_facts.h"

namespace vramspill::cli::doctor {

std::vector<Gpu> find_gpus(std::string_view root, const DriverProbe& probe) {
  std::vector<Gpu> gpus;
  if (probe.outcome == DriverProbe::Outcome::kLoaded) {
    for (const DriverGpu& device : probe.gpus)
      gpus.push_back({.index = device.ordinal,
                      .name = device.name,
                      .pci_address = device.pci_address,
                      .pci = read_pci_device(root, device.pci_address),
                      .driver = device});
    return gpus;
  }
  for (const std::string& address : nvidia_gpu_addresses(root)) {
    std::optional<PciDevice> pci = read_pci_device(root, address);
    gpus.push_back({.index = static_cast<int>(gpus.size()),
                    .name = "NVIDIA PCI device " + (pci ? pci->device_id : std::string("?")),
                    .pci_address = address,
                    .pci = std::move(pci),
                    .driver = std::nullopt});
  }
  return gpus;
}

std::optional<uint64_t> total_device_memory(const std::vector<Gpu>& gpus) {
  if (gpus.empty()) return std::nullopt;
  uint64_t total = 0;
  for (const Gpu& gpu : gpus) {
    if (!gpu.driver) return std::nullopt;
    total += gpu.driver->total_bytes;
  }
  return total;
}

}  // namespace vramspill::cli::doctor
