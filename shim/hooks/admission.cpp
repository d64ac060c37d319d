#include "hooks/admission.h"


namespace vramspill::hooks {

core::Admission driver_refusal(int device, core::Route route, uint64_t bytes) {
  core::Admission admission;
  admission.device = device;
  admission.route = route;
  admission.requested_bytes = bytes;
  return admission;
}

CUresult refuse_or_spill(ShimState& shim, const core::Admission& admission,
                         const SpillTarget& spill_target) {
  if (spill_target.vmm != nullptr)
    return shim.vmm_spill.spill(*spill_target.vmm, admission.refusal, spill_target.handle_out);
  if (spill_target.out == nullptr) {
    if (!admission.admitted) {
      // The refusal names the route: "cuMemAlloc of 1.0 GiB (...) on device 0 refused: ...".
      logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "{}", admission.refusal);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const placement::SpillRequest request{.device = admission.device,
                             .route = admission.route,
                             .bytes = spill_target.bytes,
                             .stream = spill_target.stream,
                             .stream_ordered = spill_target.stream_ordered,
                             .managed_flags = spill_target.managed_flags};
  // An admitted admission has no refusal text: empty then, the driver refused.
  const CUresult result = shim.spill.spill(request, admission.refusal, spill_target.out);
  if (result == CUDA_SUCCESS && spill_target.pitch_out != nullptr)
    *spill_target.pitch_out = spill_target.pitch;
  return result;
}

void settle_free(ShimState& shim, const core::Allocation& forgotten, CUresult result) {
  if (result != CUDA_SUCCESS) {
    shim.ledger.reinstate(forgotten);
    return;
  }
  shim.ledger.release_forgotten(forgotten);
  // The block's pool is not recorded (it may be an explicit one, not the device's current
  // pool): read every pool's figure again (Note [Refreshing pool figures]).
  if (core::is_pool_route(forgotten.route)) pool_books().refresh(shim.ledger);
}

}  // namespace vramspill::hooks
