// cuInit and the device queries.
#include <cstring>

#include "core/api.h"
#include "core/driver.h"

using simcuda::Device;
using simcuda::Driver;

namespace {

Device* device_or_null(CUdevice ordinal) {
  Driver* driver = Driver::instance();
  return driver != nullptr ? driver->device(ordinal) : nullptr;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags) {
  SIMCUDA_ENTER_ANYTIME("cuInit");
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return Driver::initialize();
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetCount(int* count) {
  SIMCUDA_ENTER("cuDeviceGetCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = Driver::instance()->device_count();
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  SIMCUDA_ENTER("cuDeviceGet");
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_or_null(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceGetName");
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::strncpy(name, device->name().c_str(), static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

namespace {

CUresult get_uuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = device->uuid();
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceGetUuid");
  return get_uuid(uuid, dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceGetUuid_v2");
  return get_uuid(uuid, dev);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceTotalMem_v2");
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = device->total_bytes();
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                                     CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceGetAttribute");
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const std::optional<int> value = device->attributes().get(attrib);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  *pi = *value;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  SIMCUDA_ENTER("cuDeviceComputeCapability");
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* device = device_or_null(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *major = device->attributes().get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).value_or(0);
  *minor = device->attributes().get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).value_or(0);
  return CUDA_SUCCESS;
}
