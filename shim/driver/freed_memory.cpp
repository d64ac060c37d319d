#include "driver/freed_memory.h"

#include "driver/real_driver.h"

namespace vramspill::driver {

bool memory_freed(uint64_t address) {
  const auto query = VRAMSPILL_REAL(cuPointerGetAttribute);
  CUcontext context = nullptr;
  return query != nullptr &&
         query(&context, CU_POINTER_ATTRIBUTE_CONTEXT, address) == CUDA_ERROR_INVALID_VALUE;
}

}  // namespace vramspill::driver
