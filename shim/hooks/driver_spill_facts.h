// The driver's and the host's answers to what placement asks (placement/spill_facts.h).
#pragma once

#include <cuda.h>

#include "placement/spill_facts.h"

namespace vramspill::hooks {

struct ShimState;

// Whether `stream` is being captured into a graph. The driver's error for a stream it does not
// know (CUDA_ERROR_INVALID_HANDLE, say) is what the program's call gets too.
CUresult check_capture(CUstream stream, bool& capturing);

class DriverSpillFacts final : public placement::SpillFacts {
 public:
  explicit DriverSpillFacts(ShimState& shim) noexcept : shim_(shim) {}

  bool integrated(int device) noexcept override;
  CUresult capturing(CUstream stream, bool& capturing) noexcept override {
    return check_capture(stream, capturing);
  }
  bool capture_in_progress() noexcept override;
  core::CaptureGate::Hold hold_off_captures() noexcept override;
  void refresh_host_limit() noexcept override;
  CUresult check_vmm_request(const CUmemAllocationProp& prop, uint64_t bytes) noexcept override;

 private:
  ShimState& shim_;
};

}  // namespace vramspill::hooks
