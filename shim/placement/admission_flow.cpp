#include "placement/admission_flow.h"

#include "telemetry/log.h"

namespace vramspill::placement {

core::Admission driver_refusal(int device, core::Route route, uint64_t bytes) {
  core::Admission admission;
  admission.device = device;
  admission.route = route;
  admission.requested_bytes = bytes;
  return admission;
}

CUresult AdmissionFlow::refuse_or_spill(const core::Admission& admission,
                                        const SpillTarget& spill_target) {
  if (spill_target.vmm != nullptr)
    return vmm_spill_.spill(*spill_target.vmm, admission.refusal, spill_target.handle_out);
  if (!spill_target.may_spill()) {
    if (!admission.admitted) {
      // The refusal names the route: "cuMemAlloc of 1.0 GiB (...) on device 0 refused: ...".
      logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "{}{}", admission.refusal,
                       spill_target.exportable_pool
                           ? " (not spilled: its pool's memory may be imported by another process)"
                           : "");
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const SpillRequest request{.device = admission.device,
                             .route = admission.route,
                             .bytes = spill_target.bytes,
                             .stream = spill_target.stream,
                             .stream_ordered = spill_target.stream_ordered,
                             .managed_flags = spill_target.managed_flags};
  // An admitted admission has no refusal text: empty then, the driver refused.
  const CUresult result = spill_.spill(request, admission.refusal, spill_target.out);
  if (result == CUDA_SUCCESS && spill_target.pitch_out != nullptr)
    *spill_target.pitch_out = spill_target.pitch;
  return result;
}

void AdmissionFlow::settle_free(const core::Allocation& forgotten, CUresult result) {
  if (result != CUDA_SUCCESS) {
    ledger_.reinstate(forgotten);
    return;
  }
  ledger_.release_forgotten(forgotten);
  // The block's pool is not recorded (it may be an explicit one, not the device's current
  // pool): read every pool's figure again (Note [Refreshing pool figures]).
  if (core::is_pool_route(forgotten.route)) pools_.refresh(ledger_);
}

}  // namespace vramspill::placement
