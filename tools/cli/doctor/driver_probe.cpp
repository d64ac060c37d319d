#include "doctor/driver_probe.h"

#include <cuda.h>
#include <dlfcn.h>

#include <array>
#include <cstdio>

namespace vramspill::cli::doctor {
namespace {

// The driver's functions doctor calls, found with dlsym.
struct DriverFunctions {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) get_version = nullptr;
  decltype(&::cuDeviceGetCount) get_count = nullptr;
  decltype(&::cuDeviceGet) get_device = nullptr;
  decltype(&::cuDeviceGetName) get_name = nullptr;
  decltype(&::cuDeviceTotalMem_v2) total_memory = nullptr;
  decltype(&::cuDeviceGetAttribute) get_attribute = nullptr;
  decltype(&::cuGetErrorName) error_name = nullptr;
};

template <typename Function>
bool find(void* handle, const char* name, Function& out, std::string& missing) {
  out = reinterpret_cast<Function>(dlsym(handle, name));
  if (out == nullptr && missing.empty()) missing = name;
  return out != nullptr;
}

std::string describe(const DriverFunctions& driver, const char* call, CUresult result) {
  const char* name = nullptr;
  if (driver.error_name(result, &name) != CUDA_SUCCESS || name == nullptr)
    name = "an unknown error";
  return std::string(call) + " returned " + name + " (" + std::to_string(result) + ")";
}

// Note [A GPU's PCI address from its attributes]
// cuDeviceGetPCIBusId spells the address, but the three attributes it is made of say the same
// (domain:bus:device.function, function 0 for a GPU), and simcuda answers them without that
// export.
std::string pci_address(int domain, int bus, int device) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.0", static_cast<unsigned>(domain),
                static_cast<unsigned>(bus), static_cast<unsigned>(device));
  return text;
}

// One device's answers; a query that fails fails the probe (`problem` says which).
bool ask_device(const DriverFunctions& driver, int ordinal, DriverGpu& gpu, std::string& problem) {
  const auto succeeded = [&](const char* call, CUresult result) {
    if (result != CUDA_SUCCESS) problem = describe(driver, call, result);
    return result == CUDA_SUCCESS;
  };
  CUdevice device = 0;
  std::array<char, 256> name{};
  size_t total = 0;
  if (!succeeded("cuDeviceGet", driver.get_device(&device, ordinal)) ||
      !succeeded("cuDeviceGetName",
                 driver.get_name(name.data(), static_cast<int>(name.size()), device)) ||
      !succeeded("cuDeviceTotalMem", driver.total_memory(&total, device)))
    return false;
  gpu.ordinal = ordinal;
  gpu.name = name.data();
  gpu.total_bytes = total;
  // An attribute this driver does not know reads as unsupported.
  const auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    return driver.get_attribute(&value, which, device) == CUDA_SUCCESS ? value : 0;
  };
  gpu.pci_address = pci_address(attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                                attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
                                attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
  gpu.integrated = attribute(CU_DEVICE_ATTRIBUTE_INTEGRATED) != 0;
  gpu.concurrent_managed_access = attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) != 0;
  gpu.unified_addressing = attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0;
  gpu.can_map_host_memory = attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) != 0;
  gpu.virtual_memory_management =
      attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  gpu.host_virtual_memory_management =
      attribute(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  gpu.memory_pools = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) != 0;
  return true;
}

}  // namespace

DriverProbe probe_driver(const std::string& library) {
  DriverProbe probe;
  probe.library = library;
  if (library == kNoDriver) return probe;
  probe.outcome = DriverProbe::Outcome::kNotLoaded;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    probe.problem = error != nullptr ? error : "dlopen failed";
    return probe;
  }
  DriverFunctions driver;
  std::string missing;
  find(handle, "cuInit", driver.init, missing);
  find(handle, "cuDriverGetVersion", driver.get_version, missing);
  find(handle, "cuDeviceGetCount", driver.get_count, missing);
  find(handle, "cuDeviceGet", driver.get_device, missing);
  find(handle, "cuDeviceGetName", driver.get_name, missing);
  find(handle, "cuDeviceTotalMem_v2", driver.total_memory, missing);
  find(handle, "cuDeviceGetAttribute", driver.get_attribute, missing);
  find(handle, "cuGetErrorName", driver.error_name, missing);
  if (!missing.empty()) {
    probe.problem = library + " has no " + missing + ": not a CUDA driver";
    return probe;
  }

  probe.outcome = DriverProbe::Outcome::kFailed;
  const auto succeeded = [&](const char* call, CUresult result) {
    if (result != CUDA_SUCCESS) probe.problem = describe(driver, call, result);
    return result == CUDA_SUCCESS;
  };
  int count = 0;
  if (!succeeded("cuDriverGetVersion", driver.get_version(&probe.version)) ||
      !succeeded("cuInit", driver.init(0)) ||
      !succeeded("cuDeviceGetCount", driver.get_count(&count)))
    return probe;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    DriverGpu gpu;
    if (!ask_device(driver, ordinal, gpu, probe.problem)) return probe;
    probe.gpus.push_back(std::move(gpu));
  }
  probe.outcome = DriverProbe::Outcome::kLoaded;
  return probe;
}

}  // namespace vramspill::cli::doctor
