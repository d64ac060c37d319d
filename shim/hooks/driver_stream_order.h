// Reuse in stream order's part of the real driver (placement/stream_ordered_blocks.h):
// cuLaunchHostFunc, cuStreamQuery, cuStreamSynchronize and cuCtxGetCurrent
// (hooks/stream_ordered_tiered.cpp).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/capture_gate.h"
#include "placement/stream_ordered_blocks.h"

namespace vramspill::hooks {

// idle() and wait_for() answer false, asking nothing, while a stream capture is in progress: a
// query of, or a wait for, the capturing stream (or the legacy stream, or in global mode any
// stream) would break the capture. The kept blocks they would have found reached wait for their
// host functions, or the next question.
class DriverStreamOrder final : public placement::StreamOrderSeam {
 public:
  // `captures`: Note [The capture gate].
  explicit DriverStreamOrder(core::CaptureGate& captures) noexcept : captures_(captures) {}

  bool queue_host_function(CUstream stream, CUhostFn run, void* data) noexcept override;
  bool idle(CUstream stream) noexcept override;
  bool wait_for(CUstream stream) noexcept override;
  uint64_t current_context() noexcept override;

 private:
  core::CaptureGate& captures_;
};

}  // namespace vramspill::hooks
