#include "core/device_attributes.h"

namespace simcuda {
namespace {

struct NamedAttribute {
  std::string_view name;
  CUdevice_attribute attribute;
  int default_value;
};

// The attributes programs and the shim branch on. Values follow an H200 (compute capability 9.0,
// 132 SMs); every attribute not listed reads as 0.
constexpr NamedAttribute kAttributes[] = {
    {"MAX_THREADS_PER_BLOCK", CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {"MAX_BLOCK_DIM_X", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {"MAX_BLOCK_DIM_Y", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {"MAX_BLOCK_DIM_Z", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {"MAX_GRID_DIM_X", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {"MAX_GRID_DIM_Y", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {"MAX_GRID_DIM_Z", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {"WARP_SIZE", CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {"MULTIPROCESSOR_COUNT", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {"CAN_MAP_HOST_MEMORY", CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {"CONCURRENT_KERNELS", CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {"COOPERATIVE_LAUNCH", CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
    {"STREAM_PRIORITIES_SUPPORTED", CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
    {"ASYNC_ENGINE_COUNT", CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
    {"UNIFIED_ADDRESSING", CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {"PCI_BUS_ID", CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0},
    {"COMPUTE_CAPABILITY_MAJOR", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {"COMPUTE_CAPABILITY_MINOR", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {"MANAGED_MEMORY", CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
    {"CONCURRENT_MANAGED_ACCESS", CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
    {"PAGEABLE_MEMORY_ACCESS", CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0},
    {"VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
     CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {"GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED",
     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1},
    {"HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED",
     CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0},
    {"MEMORY_POOLS_SUPPORTED", CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
    {"NUMA_CONFIG", CU_DEVICE_ATTRIBUTE_NUMA_CONFIG, 0},
    {"HOST_NUMA_ID", CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0},
    {"HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
     CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {"HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
     CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {"L2_CACHE_SIZE", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 * 1024 * 1024},
    {"GLOBAL_MEMORY_BUS_WIDTH", CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
    {"MAX_SHARED_MEMORY_PER_BLOCK", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
     232448},
    {"MAX_REGISTERS_PER_BLOCK", CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {"MAX_THREADS_PER_MULTIPROCESSOR", CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    // Stream memory operations (api/stream_memory_ops.cpp); no flush of remote writes.
    {"CAN_USE_64_BIT_STREAM_MEM_OPS", CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 1},
    {"CAN_USE_STREAM_WAIT_VALUE_NOR", CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1},
    {"INTEGRATED", CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
    {"TCC_DRIVER", CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
    // A card without NVSwitch (Note [Multicast objects] in api/multicast.cpp).
    {"MULTICAST_SUPPORTED", CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0},
};

}  // namespace

DeviceAttributes::DeviceAttributes(int ordinal, const std::vector<AttributeOverride>& overrides)
    : values_(CU_DEVICE_ATTRIBUTE_MAX, 0) {
  for (const NamedAttribute& named : kAttributes) values_[named.attribute] = named.default_value;
  // Each simulated device sits on its own PCI bus, so bus ids and UUIDs differ.
  values_[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = 0x18 + ordinal;
  for (const AttributeOverride& override_ : overrides) values_[override_.attribute] = override_.value;
}

std::optional<int> DeviceAttributes::get(CUdevice_attribute attribute) const {
  if (attribute <= 0 || static_cast<size_t>(attribute) >= values_.size()) return std::nullopt;
  return values_[static_cast<size_t>(attribute)];
}

std::optional<CUdevice_attribute> attribute_by_name(std::string_view name) {
  for (const NamedAttribute& named : kAttributes)
    if (named.name == name) return named.attribute;
  return std::nullopt;
}

std::string overridable_attribute_names() {
  std::string names;
  for (const NamedAttribute& named : kAttributes) {
    if (!names.empty()) names += ", ";
    names += named.name;
  }
  return names;
}

}  // namespace simcuda
