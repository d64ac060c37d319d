#include "tiers/spill_tier.h"

namespace vramspill::tiers {

bool SpillTier::supported(int device) noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= kDevices) return false;
  std::atomic<uint8_t>& cached = support_[static_cast<std::size_t>(device)];
  if (const uint8_t known = cached.load(std::memory_order_relaxed); known != kUnknown)
    return known == kSupported;
  const std::optional<bool> answer = do_query_support(device);
  if (!answer) return false;  // not for this request; asked again for the next
  cached.store(*answer ? kSupported : kUnsupported, std::memory_order_relaxed);
  return *answer;
}

SpillOutcome SpillTier::allocate(const SpillAllocation& request, CUdeviceptr* out) noexcept {
  if (out == nullptr || request.bytes == 0)
    return {.result = CUDA_ERROR_INVALID_VALUE, .refusal = SpillRefusal::kDriver};
  SpillOutcome outcome = do_allocate(request, out);
  // A tier that failed without a reason is blamed on the driver, and a success carries none: the
  // log line built from the refusal must match what happened.
  if (outcome.result == CUDA_SUCCESS) {
    outcome.refusal = SpillRefusal::kNone;
  } else if (outcome.refusal == SpillRefusal::kNone) {
    outcome.refusal = SpillRefusal::kDriver;
  }
  return outcome;
}

}  // namespace vramspill::tiers
