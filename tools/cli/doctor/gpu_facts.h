// The GPUs `vramspill doctor` checks: the driver's devices, each with its sysfs entry, or, when no
// driver answers, the NVIDIA GPUs sysfs lists (without the driver's figures and features).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/driver_probe.h"
#include "doctor/pci_devices.h"

namespace vramspill::cli::doctor {

struct Gpu {
  int index = 0;  // the driver's ordinal, or the position in sysfs's order
  std::string name;
  std::string pci_address;
  std::optional<PciDevice> pci;     // nullopt: no NVIDIA device at that address in sysfs
  std::optional<DriverGpu> driver;  // nullopt: found in sysfs only
};

std::vector<Gpu> find_gpus(std::string_view root, const DriverProbe& probe);

// The device memory of all the GPUs; nullopt unless the driver told it for each.
std::optional<uint64_t> total_device_memory(const std::vector<Gpu>& gpus);

}  // namespace vramspill::cli::doctor
