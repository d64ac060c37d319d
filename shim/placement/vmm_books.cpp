#include "placement/vmm_books.h"

namespace vramspill::placement {

void VmmBooks::settle(const core::Allocation& forgotten, CUresult result) noexcept {
  admission_.settle_free(forgotten, result);
  if (result == CUDA_SUCCESS && forgotten.route == core::Route::kSpillVmmHost)
    vmm_spill_.freed(forgotten);
}

}  // namespace vramspill::placement
