// Reuse in stream order's part of the real driver (placement/stream_ordered_blocks.h):
// cuLaunchHostFunc, cuStreamQuery and cuStreamSynchronize (hooks/stream_ordered_tiered.cpp).
#pragma once

#include <cuda.h>

#include "placement/stream_ordered_blocks.h"

namespace vramspill::hooks {

class DriverStreamOrder final : public placement::StreamOrderSeam {
 public:
  bool queue_host_function(CUstream stream, CUhostFn run, void* data) noexcept override;
  bool idle(CUstream stream) noexcept override;
  bool wait_for(CUstream stream) noexcept override;
};

}  // namespace vramspill::hooks
