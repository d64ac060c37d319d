// The tracked window's events on the real driver (placement/submission_order.h's
// SubmissionEvents): cuCtxGetCurrent, cuEventCreate, cuEventRecord, cuEventDestroy.
#pragma once

#include <cstdint>
#include <shared_mutex>

#include "placement/submission_order.h"

namespace vramspill::hooks {

class DriverSubmissionEvents final : public placement::SubmissionEvents {
 public:
  // `capture_gate`: held shared while an event is recorded on a program's stream
  // (driver/stream_capture.h).
  explicit DriverSubmissionEvents(std::shared_mutex& capture_gate) noexcept
      : capture_gate_(capture_gate) {}

  uint64_t current_context() noexcept override;
  uint64_t create() noexcept override;
  bool record(uint64_t event, uint64_t stream) noexcept override;
  void destroy(uint64_t event) noexcept override;

 private:
  std::shared_mutex& capture_gate_;
};

}  // namespace vramspill::hooks
