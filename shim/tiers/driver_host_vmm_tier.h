// The host-located VMM tier on the real driver (tiers/host_vmm_tier.h): the device attributes
// that say where such memory can live, and cuMemCreate itself.
#pragma once

#include "tiers/host_vmm_tier.h"

namespace vramspill::tiers {

class DriverHostVmmTier final : public HostVmmTier {
 private:
  // HOST_NUMA on the device's node (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) where the device supports
  // HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT and the node is known; else HOST where it supports
  // HOST_VIRTUAL_MEMORY_MANAGEMENT; else none.
  std::optional<HostVmmLocation> do_query_location(int device) noexcept override;
  CUresult do_create(CUmemGenericAllocationHandle* out, uint64_t bytes,
                     const CUmemAllocationProp& prop, unsigned long long flags) noexcept override;
};

}  // namespace vramspill::tiers
