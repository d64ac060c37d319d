#include "hooks/submission_events.h"

#include <cuda.h>

#include <mutex>

#include "driver/real_driver.h"
#include "driver/stream_capture.h"

namespace vramspill::hooks {

uint64_t DriverSubmissionEvents::current_context() noexcept {
  const auto current = VRAMSPILL_REAL(cuCtxGetCurrent);
  CUcontext context = nullptr;
  if (current == nullptr || current(&context) != CUDA_SUCCESS) return 0;
  return reinterpret_cast<uint64_t>(context);
}

uint64_t DriverSubmissionEvents::create() noexcept {
  const auto create_event = VRAMSPILL_REAL(cuEventCreate);
  CUevent event = nullptr;
  if (create_event == nullptr || create_event(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return 0;
  return reinterpret_cast<uint64_t>(event);
}

bool DriverSubmissionEvents::record(uint64_t event, uint64_t stream) noexcept {
  const auto record_event = VRAMSPILL_REAL(cuEventRecord);
  // A stream that began capturing after the submission's driver call, unknown to the shim's
  // count, would take the event into its graph, where later moves could not wait for it.
  const auto held = captures_.hold();
  return record_event != nullptr && !driver::stream_capturing(stream) &&
         record_event(reinterpret_cast<CUevent>(event), reinterpret_cast<CUstream>(stream)) ==
             CUDA_SUCCESS;
}

void DriverSubmissionEvents::destroy(uint64_t event) noexcept {
  if (const auto destroy_event = VRAMSPILL_REAL(cuEventDestroy_v2))
    destroy_event(reinterpret_cast<CUevent>(event));
}

}  // namespace vramspill::hooks
