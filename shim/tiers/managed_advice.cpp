#include "tiers/managed_advice.h"

#include "driver/real_driver.h"

namespace vramspill::tiers {

CUresult advise_managed(CUdeviceptr pointer, uint64_t bytes, CUmem_advise advice, int device,
                        bool on_host) noexcept {
  if (const auto advise_v2 = VRAMSPILL_REAL(cuMemAdvise_v2)) {
    const CUmemLocation location = on_host ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0}
                                           : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, device};
    return advise_v2(pointer, bytes, advice, location);
  }
  if (const auto advise_v1 = VRAMSPILL_REAL(cuMemAdvise))
    return advise_v1(pointer, bytes, advice, on_host ? CU_DEVICE_CPU : device);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace vramspill::tiers
