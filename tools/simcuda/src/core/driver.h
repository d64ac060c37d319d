// The process-wide state of the simulated driver, created by the first successful cuInit and
// never destroyed (exit-time callers, such as a framework's static destructors, may still call in).
#pragma once

#include <cuda.h>

#include <memory>
#include <vector>

#include "core/address_space.h"
#include "core/allocations.h"
#include "core/config.h"
#include "core/device.h"
#include "core/physical_memory.h"

namespace simcuda {

class Driver {
 public:
  // nullptr until cuInit succeeded.
  static Driver* instance();
  // Reads the configuration and builds the devices. Idempotent; a bad SIMCUDA_* value is
  // reported on stderr once and every later cuInit returns the same error.
  static CUresult initialize();

  const Config& config() const { return config_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  Device* device(CUdevice ordinal);  // nullptr for an invalid ordinal

  AddressSpace& addresses() { return addresses_; }
  PhysicalMemory& physical() { return physical_; }
  AllocationRegistry& allocations() { return allocations_; }

  // SIMCUDA_FAIL: the injected result for this call of `export_name`, or CUDA_SUCCESS.
  CUresult injected_fault(const char* export_name);

 private:
  explicit Driver(Config config);

  Config config_;
  std::vector<std::unique_ptr<Device>> devices_;
  AddressSpace addresses_;
  PhysicalMemory physical_;
  AllocationRegistry allocations_;
  std::unique_ptr<std::atomic<uint64_t>[]> fault_calls_;  // one counter per SIMCUDA_FAIL rule
};

}  // namespace simcuda
