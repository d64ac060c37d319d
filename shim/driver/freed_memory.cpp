#include "driver/freed_memory.h"

#include "driver/real_driver.h"

namespace vramspill::driver {

bool memory_freed(uint64_t address) {
  const auto query = VRAMSPILL_REAL(cuPointerGetAttribute);
  CUcontext context = nullptr;
  return query != nullptr &&
         query(&context, CU_POINTER_ATTRIBUTE_CONTEXT, address) == CUDA_ERROR_INVALID_VALUE;
}

CUresult free_device_memory(uint64_t address) {
  const auto free_memory = VRAMSPILL_REAL(cuMemFree_v2);
  if (free_memory == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult result = free_memory(address);
  return result != CUDA_SUCCESS && memory_freed(address) ? CUDA_SUCCESS : result;
}

}  // namespace vramspill::driver
