// The CUDA driver, asked by `vramspill doctor`: its version, its devices and the features
// spilling needs (README.md, "Spilling"). The command never links libcuda: the driver is loaded
// here, at run time, so that doctor also runs, and says why, where no driver loads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vramspill::cli::doctor {

// What one device reports.
struct DriverGpu {
  int ordinal = 0;
  std::string name;
  uint64_t total_bytes = 0;
  std::string pci_address;  // "0000:18:00.0", as sysfs names the device
  bool integrated = false;
  bool concurrent_managed_access = false;       // managed spills
  bool unified_addressing = false;              // host-pool spills, with...
  bool can_map_host_memory = false;             // ...mapped host memory
  bool virtual_memory_management = false;       // cuMemCreate
  bool host_virtual_memory_management = false;  // cuMemCreate of host-located memory
  bool memory_pools = false;                    // cuMemAllocAsync
};

struct DriverProbe {
  enum class Outcome : uint8_t {
    kSkipped,    // --driver none
    kNotLoaded,  // dlopen failed, or a function is missing
    kFailed,     // cuInit or a query failed
    kLoaded,
  };
  Outcome outcome = Outcome::kSkipped;
  std::string library;
  std::string problem;  // why, unless loaded or skipped
  int version = 0;      // cuDriverGetVersion: 13000 for CUDA 13.0
  std::vector<DriverGpu> gpus;
};

// The library name that means "load no driver".
inline constexpr const char* kNoDriver = "none";

// Loads `library` (a name the dynamic loader looks up, or a path) and asks it. The library stays
// loaded: unloading a driver that has started threads is unsafe, and the command ends soon.
DriverProbe probe_driver(const std::string& library);

}  // namespace vramspill::cli::doctor
