// The tracked window's events on the real driver (placement/submission_order.h's
// SubmissionEvents): cuCtxGetCurrent, cuEventCreate, cuEventRecord, cuEventDestroy.
#pragma once

#include <cstdint>

#include "core/capture_gate.h"
#include "placement/submission_order.h"

namespace vramspill::hooks {

class DriverSubmissionEvents final : public placement::SubmissionEvents {
 public:
  // `captures`: held while an event is recorded on a program's stream (Note [The capture gate]).
  explicit DriverSubmissionEvents(core::CaptureGate& captures) noexcept : captures_(captures) {}

  uint64_t current_context() noexcept override;
  uint64_t create() noexcept override;
  bool record(uint64_t event, uint64_t stream) noexcept override;
  void destroy(uint64_t event) noexcept override;

 private:
  core::CaptureGate& captures_;
};

}  // namespace vramspill::hooks
