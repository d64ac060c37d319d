#include "hooks/pool_allocation.h"

namespace vramspill::hooks {

CUresult allocating_device(core::Route route, CUmemoryPool pool, CUstream stream, int& device) {
  if (route == core::Route::kMemAllocAsync) return stream_device(stream, device);
  if (const std::optional<int> pool_place = pool_books().device_of(pool)) {
    device = *pool_place;
    return CUDA_SUCCESS;
  }
  return current_device(device);
}

}  // namespace vramspill::hooks
