#include "tiers/driver_host_vmm_tier.h"

#include "driver/real_driver.h"

namespace vramspill::tiers {

std::optional<HostVmmLocation> DriverHostVmmTier::do_query_location(int device) noexcept {
  const auto get_attribute = VRAMSPILL_REAL(cuDeviceGetAttribute);
  if (get_attribute == nullptr) return HostVmmLocation{};
  int numa_vmm = 0;
  if (get_attribute(&numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                    device) != CUDA_SUCCESS)
    return std::nullopt;
  if (numa_vmm != 0) {
    // -1 where the system has no NUMA: the node-less HOST location is the one left then.
    int node = -1;
    if (get_attribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) != CUDA_SUCCESS)
      return std::nullopt;
    if (node >= 0)
      return HostVmmLocation{.kind = HostVmmLocation::Kind::kHostNuma, .numa_node = node};
  }
  int host_vmm = 0;
  if (get_attribute(&host_vmm, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                    device) != CUDA_SUCCESS)
    return std::nullopt;
  return HostVmmLocation{.kind = host_vmm != 0 ? HostVmmLocation::Kind::kHost
                                               : HostVmmLocation::Kind::kNone};
}

CUresult DriverHostVmmTier::do_create(CUmemGenericAllocationHandle* out, uint64_t bytes,
                                      const CUmemAllocationProp& prop,
                                      unsigned long long flags) noexcept {
  const auto create = VRAMSPILL_REAL(cuMemCreate);
  if (create == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return create(out, bytes, &prop, flags);
}

}  // namespace vramspill::tiers
