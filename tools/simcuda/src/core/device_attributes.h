// The attribute values a simulated device reports (an H200-like part), and their names for
// SIMCUDA_ATTRS overrides.
#pragma once

#include <cuda.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace simcuda {

class DeviceAttributes {
 public:
  DeviceAttributes(int ordinal, const std::vector<AttributeOverride>& overrides);
  // nullopt for a value outside the CUdevice_attribute enum (the driver's INVALID_VALUE).
  std::optional<int> get(CUdevice_attribute attribute) const;
  bool supports(CUdevice_attribute attribute) const { return get(attribute).value_or(0) != 0; }

 private:
  std::vector<int> values_;
};

// Name without the CU_DEVICE_ATTRIBUTE_ prefix, e.g. "CONCURRENT_MANAGED_ACCESS".
std::optional<CUdevice_attribute> attribute_by_name(std::string_view name);
std::string overridable_attribute_names();

}  // namespace simcuda
