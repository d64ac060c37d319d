// simcuda's configuration, read once from SIMCUDA_* environment variables at cuInit.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

namespace simcuda {

// Modeled link and memory speeds. Defaults are near an H200 (HBM3e) on PCIe Gen5 x16.
struct CostModelConfig {
  // An H200's measured rates (tools/simcuda/README.md, "Fidelity to a real driver"): a
  // device-to-device copy reads and writes 4.3 TB/s, and a 128 MiB host-device copy, which
  // costs its link time plus its HBM time here, runs at 55.2 GB/s.
  double hbm_bytes_per_second = 4.3e12;
  double link_bytes_per_second = 5.59e10;
  // SIMCUDA_VMM_COST: what a VMM call over several granules costs the host (Note [Host call
  // costs] in core/host_call_cost.h). Per granule is the measured figure times the range, the
  // default; per call is one granule's figure for each location the range covers, whatever its
  // length: the two bounds of what a GPU may show, neither measured for ranges.
  bool vmm_cost_per_call = false;
};

// SIMCUDA_FAIL=FUNCTION@N=RESULT: the Nth call (1-based) of FUNCTION returns RESULT.
// FUNCTION is an export name (cuMemAlloc_v2) or a base name, which matches every versioned and
// per-thread export of it (cuMemAlloc matches cuMemAlloc, cuMemAlloc_v2).
struct FaultRule {
  std::string function;
  uint64_t nth_call = 0;
  CUresult result = CUDA_SUCCESS;
};

struct AttributeOverride {
  CUdevice_attribute attribute;
  int value = 0;
};

struct Config {
  int device_count = 1;
  uint64_t vram_bytes = uint64_t{1} << 30;
  std::string stats_path;
  // SIMCUDA_REMAP_VIOLATIONS=abort (Note [Remap protocol] in remap_check.h).
  bool abort_on_remap_violation = false;
  std::vector<FaultRule> faults;
  std::vector<AttributeOverride> attribute_overrides;
  CostModelConfig cost;
};

struct ConfigResult {
  Config config;
  std::string error;  // empty when the environment was valid; otherwise names variable and value
};

ConfigResult config_from_environment();

}  // namespace simcuda
