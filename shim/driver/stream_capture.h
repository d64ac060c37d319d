// Whether a program's stream may take the shim's own work now: an event recorded on a stream
// being captured into a graph becomes part of the capture, and a wait from it on an event recorded
// outside invalidates the capture (Note [A capture begun while a move is queued] in
// tiers/driver_prefetch_ops.h). Callers ask holding the capture gate (core/capture_gate.h), which
// every cuStreamBeginCapture hook holds exclusively, so no capture begins between the answer and
// the record or wait it allows.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

#include "driver/real_driver.h"

namespace vramspill::driver {

// cuStreamIsCapturing's answer for `stream`: whether it captures, or nullopt where the driver
// refuses to say (the legacy stream answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while another
// stream captures). A driver without captures has none.
inline std::optional<bool> stream_capture_status(uint64_t stream) noexcept {
  const auto is_capturing = VRAMSPILL_REAL(cuStreamIsCapturing);
  if (is_capturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (is_capturing(reinterpret_cast<CUstream>(stream), &status) != CUDA_SUCCESS)
    return std::nullopt;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// The context of `stream` (as a hook names it: the legacy and per-thread handles are the calling
// thread's context's), or 0 when the driver does not say.
inline uint64_t stream_context(uint64_t stream) noexcept {
  const auto get_context = VRAMSPILL_REAL(cuStreamGetCtx);
  CUcontext context = nullptr;
  if (get_context == nullptr ||
      get_context(reinterpret_cast<CUstream>(stream), &context) != CUDA_SUCCESS)
    return 0;
  return reinterpret_cast<uint64_t>(context);
}

// Whether `stream` may be capturing: a refused answer counts as capturing (a record on the legacy
// stream would invalidate the capture that made it refuse).
inline bool stream_capturing(uint64_t stream) noexcept {
  return stream_capture_status(stream).value_or(true);
}

}  // namespace vramspill::driver
