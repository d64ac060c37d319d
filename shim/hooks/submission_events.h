// The tracked window's events on the real driver (placement/submission_order.h's
// SubmissionEvents): cuCtxGetCurrent, cuEventCreate, cuEventRecord, cuEventDestroy.
#pragma once

#include <cstdint>

#include "placement/submission_order.h"

namespace vramspill::hooks {

class DriverSubmissionEvents final : public placement::SubmissionEvents {
 public:
  uint64_t current_context() noexcept override;
  uint64_t create() noexcept override;
  bool record(uint64_t event, uint64_t stream) noexcept override;
  void destroy(uint64_t event) noexcept override;
};

}  // namespace vramspill::hooks
