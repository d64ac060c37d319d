#include "tiers/managed_tier.h"

#include "driver/freed_memory.h"
#include "driver/real_driver.h"
#include "tiers/managed_advice.h"
#include "telemetry/log.h"
#include "telemetry/rate_limit.h"

namespace vramspill::tiers {

std::optional<bool> ManagedTier::do_query_support(int device) noexcept {
  const auto get_attribute = VRAMSPILL_REAL(cuDeviceGetAttribute);
  int concurrent = 0;
  if (get_attribute == nullptr) return false;
  if (get_attribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device) !=
      CUDA_SUCCESS)
    return std::nullopt;
  return concurrent != 0;
}

SpillOutcome ManagedTier::do_allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept {
  const auto allocate_managed = VRAMSPILL_REAL(cuMemAllocManaged);
  if (allocate_managed == nullptr) return {.result = CUDA_ERROR_NOT_SUPPORTED};
  // Note [Stream-ordered frees on the shim's thread]: bytes whose free is due may be on their way.
  constexpr auto kDueFreePatience = std::chrono::milliseconds(1000);
  while (!budget_.try_reserve(request.bytes)) {
    if (!stream_ordered_frees_.wait_for_a_due_free(kDueFreePatience))
      return {.result = CUDA_ERROR_OUT_OF_MEMORY, .refusal = SpillRefusal::kHostLimit};
  }
  const CUresult result = allocate_managed(out, request.bytes, request.managed_flags);
  if (result != CUDA_SUCCESS) {
    budget_.release(request.bytes);
    return {.result = result, .refusal = SpillRefusal::kDriver};
  }
  advise(request.device, *out, request.bytes);
  return {};
}

CUresult ManagedTier::do_free(CUdeviceptr pointer, uint64_t bytes, int /*device*/) noexcept {
  return free_now(pointer, bytes);
}

bool ManagedTier::do_forget_if_lost(CUdeviceptr pointer, uint64_t bytes) noexcept {
  if (!driver::memory_freed(pointer)) return false;
  budget_.release(bytes);
  return true;
}

CUresult ManagedTier::free_now(CUdeviceptr pointer, uint64_t bytes) noexcept {
  const CUresult result = driver::free_device_memory(pointer);
  if (result == CUDA_SUCCESS) budget_.release(bytes);
  return result;
}

// Advice only steers the driver: an allocation whose advice fails is still good memory, so a
// failure is logged (rate-limited) and the spill goes ahead.
void ManagedTier::advise(int device, CUdeviceptr pointer, uint64_t bytes) noexcept {
  const auto apply = [&](CUmem_advise advice, bool on_host) {
    const CUresult result = advise_managed(pointer, bytes, advice, device, on_host);
    if (result != CUDA_SUCCESS)
      logging::limited(LogLevel::kWarn, RateKey::kManagedAdvice,
                       "cuMemAdvise({}) on managed spill memory failed with error {}: the driver "
                       "places its pages as it sees fit",
                       static_cast<int>(advice), static_cast<int>(result));
  };
  switch (config_.managed_location) {
    case ManagedLocation::kHost:
      apply(CU_MEM_ADVISE_SET_PREFERRED_LOCATION, /*on_host=*/true);
      break;
    case ManagedLocation::kDevice:
      apply(CU_MEM_ADVISE_SET_PREFERRED_LOCATION, /*on_host=*/false);
      break;
    case ManagedLocation::kNone:
      break;
  }
  if (config_.managed_accessed_by) apply(CU_MEM_ADVISE_SET_ACCESSED_BY, /*on_host=*/false);
}

}  // namespace vramspill::tiers
