// Reuse in stream order's part of the real driver (placement/stream_ordered_blocks.h):
// cuLaunchHostFunc, cuStreamQuery and cuStreamSynchronize (hooks/stream_ordered_tiered.cpp).
#pragma once

#include <cuda.h>

#include <atomic>
#include <shared_mutex>

#include "placement/stream_ordered_blocks.h"

namespace vramspill::hooks {

// idle() and wait_for() answer false, asking nothing, while a stream capture is in progress: a
// query of, or a wait for, the capturing stream (or the legacy stream, or in global mode any
// stream) would break the capture. The kept blocks they would have found reached wait for their
// host functions, or the next question.
class DriverStreamOrder final : public placement::StreamOrderSeam {
 public:
  // `captures`: the stream captures in progress (hooks/capture_hooks.cpp); `capture_gate`: held
  // exclusively while the driver begins one, so none begins between the look and the call.
  DriverStreamOrder(const std::atomic<int>& captures, std::shared_mutex& capture_gate) noexcept
      : captures_(captures), capture_gate_(capture_gate) {}

  bool queue_host_function(CUstream stream, CUhostFn run, void* data) noexcept override;
  bool idle(CUstream stream) noexcept override;
  bool wait_for(CUstream stream) noexcept override;

 private:
  const std::atomic<int>& captures_;
  std::shared_mutex& capture_gate_;
};

}  // namespace vramspill::hooks
