#include "hooks/devices.h"

#include <atomic>
#include <cstdint>

#include "driver/context_scope.h"
#include "driver/real_driver.h"
#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

// A bit per device, so know_device() costs one load after the first time. A device's integrated
// bit is set before its known bit is published.
std::atomic<uint64_t> known_devices{0};
std::atomic<uint64_t> integrated_devices{0};

uint64_t device_bit(int device) {
  return device >= 0 && device < 64 ? uint64_t{1} << device : 0;
}

// Note [Integrated devices]. A failed query counts as a discrete device: spilling stays on.
bool query_integrated(int device) {
  return device_attribute(device, CU_DEVICE_ATTRIBUTE_INTEGRATED).value_or(0) != 0;
}

}  // namespace

CUresult device_of_context(CUcontext context, int& device) {
  const driver::ContextScope scope(context);
  return scope.entered() ? current_device(device) : scope.status();
}

CUresult current_device(int& device) {
  const auto get_device = VRAMSPILL_REAL(cuCtxGetDevice);
  if (get_device == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUdevice current = 0;
  const CUresult result = get_device(&current);
  if (result == CUDA_SUCCESS) device = current;
  return result;
}

CUresult stream_device(CUstream stream, int& device) {
  if (const auto get_stream_device = VRAMSPILL_REAL(cuStreamGetDevice)) {
    CUdevice found = 0;
    if (get_stream_device(stream, &found) == CUDA_SUCCESS) {
      device = found;
      return CUDA_SUCCESS;
    }
  }
  const auto get_stream_context = VRAMSPILL_REAL(cuStreamGetCtx);
  const auto get_current = VRAMSPILL_REAL(cuCtxGetCurrent);
  CUcontext stream_context = nullptr;
  CUcontext current = nullptr;
  if (get_stream_context == nullptr || get_current == nullptr ||
      get_stream_context(stream, &stream_context) != CUDA_SUCCESS ||
      get_current(&current) != CUDA_SUCCESS || stream_context == current ||
      device_of_context(stream_context, device) != CUDA_SUCCESS)
    return current_device(device);
  return CUDA_SUCCESS;
}

CUresult know_device(ShimState& shim, int device) {
  const uint64_t bit = device_bit(device);
  if (bit == 0 || (known_devices.load(std::memory_order_acquire) & bit) != 0) return CUDA_SUCCESS;
  const auto total_memory = VRAMSPILL_REAL(cuDeviceTotalMem_v2);
  if (total_memory == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  size_t total = 0;
  if (const CUresult result = total_memory(&total, device); result != CUDA_SUCCESS) return result;
  shim.ledger.set_device(device, total, shim.config.device.limit(total));
  if (query_integrated(device)) integrated_devices.fetch_or(bit, std::memory_order_relaxed);
  // Only the thread that learns the device first says so.
  if ((known_devices.fetch_or(bit, std::memory_order_release) & bit) == 0 && is_integrated(device))
    logging::info("device {} is integrated: its memory is the host's, so spilling would buy "
                  "nothing; vramspill holds its budget and refuses what does not fit",
                  device);
  return CUDA_SUCCESS;
}

bool is_integrated(int device) {
  return (integrated_devices.load(std::memory_order_relaxed) & device_bit(device)) != 0;
}

std::optional<int> device_attribute(int device, CUdevice_attribute attribute) noexcept {
  const auto get_attribute = VRAMSPILL_REAL(cuDeviceGetAttribute);
  int value = 0;
  if (get_attribute == nullptr || get_attribute(&value, attribute, device) != CUDA_SUCCESS)
    return std::nullopt;
  return value;
}

std::optional<bool> concurrent_managed_access(int device) noexcept {
  const std::optional<int> concurrent =
      device_attribute(device, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  if (!concurrent) return std::nullopt;
  return *concurrent != 0;
}

}  // namespace vramspill::hooks
