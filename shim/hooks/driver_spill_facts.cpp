#include "hooks/driver_spill_facts.h"

#include "driver/real_driver.h"
#include "hooks/devices.h"
#include "hooks/shim_state.h"

namespace vramspill::hooks {

CUresult check_capture(CUstream stream, bool& capturing) {
  const auto is_capturing_stream = VRAMSPILL_REAL(cuStreamIsCapturing);
  if (is_capturing_stream == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = is_capturing_stream(stream, &status);
  capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  return result;
}

bool DriverSpillFacts::integrated(int device) noexcept { return is_integrated(device); }

bool DriverSpillFacts::capture_in_progress() noexcept {
  return shim_.captures.capturing();
}

core::CaptureGate::Hold DriverSpillFacts::hold_off_captures() noexcept {
  return shim_.captures.hold();
}

void DriverSpillFacts::refresh_host_limit() noexcept { hooks::refresh_host_limit(shim_); }

CUresult DriverSpillFacts::check_vmm_request(const CUmemAllocationProp& prop,
                                             uint64_t bytes) noexcept {
  const auto granularity_of = VRAMSPILL_REAL(cuMemGetAllocationGranularity);
  if (granularity_of == nullptr) return CUDA_SUCCESS;  // nothing to ask: the refusal stands
  size_t granularity = 0;
  const CUresult result =
      granularity_of(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (result != CUDA_SUCCESS) return result;
  return granularity != 0 && bytes % granularity != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

}  // namespace vramspill::hooks
