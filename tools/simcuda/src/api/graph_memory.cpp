// The device's graph memory attributes (Note [Graph memory] in core/graph_memory.h).
#include "core/graph_memory.h"

#include "core/api.h"
#include "core/driver.h"

namespace {

bool valid_device(CUdevice device) {
  return simcuda::Driver::instance()->device(device) != nullptr;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device,
                                                             CUgraphMem_attribute attr,
                                                             void* value) {
  SIMCUDA_ENTER("cuDeviceGetGraphMemAttribute");
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::graph_memory_attribute(device, attr, static_cast<cuuint64_t*>(value));
}

SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device,
                                                             CUgraphMem_attribute attr,
                                                             void* value) {
  SIMCUDA_ENTER("cuDeviceSetGraphMemAttribute");
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  // Only the watermarks can be set, and only to zero.
  if (value == nullptr || *static_cast<const cuuint64_t*>(value) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return simcuda::reset_graph_memory_watermark(device, attr);
}

// simcuda keeps no graph memory beyond what graphs and outstanding allocations hold: nothing to
// trim.
SIMCUDA_EXPORT CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  SIMCUDA_ENTER("cuDeviceGraphMemTrim");
  return valid_device(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
