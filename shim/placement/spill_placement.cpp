#include "placement/spill_placement.h"

#include "placement/spill_log.h"
#include "telemetry/log.h"
#include "telemetry/nvtx.h"
#include "util/bytes.h"

namespace vramspill::placement {
namespace {

void log_not_spilled(const std::string& refusal, const SpillRequest& request,
                     const std::string& why) {
  placement::log_not_spilled(refusal, request.route, request.bytes, request.device, why);
}

// The errors by which the driver refuses a call that a stream capture forbids.
bool is_capture_error(CUresult result) {
  return result == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ||
         result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
         result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ||
         result == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
}

}  // namespace

CUresult SpillPlacement::spill(const SpillRequest& request, const std::string& refusal,
                               CUdeviceptr* out) noexcept {
  bool spilled = false;
  // A tier the driver refused because a stream capture forbids the call: the program gets that
  // error, as it would have from the driver's own allocation then, not an out-of-memory that a
  // framework answers by freeing its cache and trying again, with more calls the capture forbids.
  CUresult capture_refusal = CUDA_SUCCESS;
  try {
    if (config_.mode == SpillMode::kOff) {
      // The driver's own OUT_OF_MEMORY passes as it is, as without vramspill.
      if (!refusal.empty()) logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "{}", refusal);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (facts_.integrated(request.device)) {  // Note [Integrated devices] in hooks/devices.h
      log_not_spilled(refusal, request,
                      "the device is integrated (its memory is the host's), so spilling would "
                      "buy nothing");
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (request.bytes < config_.min_size) {
      log_not_spilled(refusal, request,
                      "smaller than [spill] min_size (" + format_bytes(config_.min_size) + ")");
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (request.stream_ordered) {
      bool capturing = false;
      if (const CUresult result = facts_.capturing(request.stream, capturing);
          result != CUDA_SUCCESS)
        return result;
      if (capturing) {
        log_not_spilled(refusal, request, "its stream is being captured into a graph");
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
    facts_.refresh_host_limit();
    const Chain chain = chain_for(request);
    std::string why;
    const tiers::SpillAllocation allocation{
        .device = request.device, .bytes = request.bytes, .managed_flags = request.managed_flags};
    // Note [Stream-ordered spills beside a capture]: no capture begins between the look and the
    // allocation.
    core::CaptureGate::Hold captures_held_off;
    if (request.stream_ordered) captures_held_off = facts_.hold_off_captures();
    const bool beside_a_capture = request.stream_ordered && facts_.capture_in_progress();
    for (tiers::SpillTier* tier : chain.list()) {
      if (beside_a_capture && tier->route() == core::Route::kSpillManaged) {
        why += std::string(why.empty() ? "" : "; ") + tier->name() +
               ": a stream capture is in progress, and making managed memory could break it";
        continue;
      }
      const tiers::SpillOutcome outcome = tier->allocate(allocation, out);
      if (outcome.result != CUDA_SUCCESS) {
        if (capture_refusal == CUDA_SUCCESS && is_capture_error(outcome.result))
          capture_refusal = outcome.result;
        explain(*tier, outcome, request, why);
        continue;
      }
      // Recorded before anything that could throw: a spill that happened is never reported as
      // a failure (the allocation would be lost to the program and held forever).
      const core::Admission admission = ledger_.admit(request.device, tier->route(), request.bytes);
      ledger_.on_allocated(admission, *out, request.bytes);
      spilled = true;
      if (!refusal.empty()) ledger_.note_over_budget_served(request.device);
      log_spilled(request.route, request.bytes, request.device, tier->name(), !refusal.empty());
      nvtx::spilled(request.bytes, request.device, tier->name());
      return CUDA_SUCCESS;
    }
    if (chain.list().empty()) {
      why =
          "no spill tier works on this device (managed memory needs concurrent managed "
          "access; the host pool needs unified addressing and mapped host memory)";
    }
    log_not_spilled(refusal, request, why);
  } catch (...) {  // a log line could not be built: the answer stands without it
  }
  if (spilled) return CUDA_SUCCESS;
  return capture_refusal != CUDA_SUCCESS ? capture_refusal : CUDA_ERROR_OUT_OF_MEMORY;
}

SpillPlacement::Chain SpillPlacement::chain_for(const SpillRequest& request) {
  Chain chain;
  if (request.route == core::Route::kMemAllocManaged) {  // managed stays managed
    chain.add(managed_);
    return chain;
  }
  const SpillMode mode = config_.mode;
  const bool managed = managed_.supported(request.device);
  const bool host = host_.supported(request.device);
  if (mode == SpillMode::kManaged && !managed) {
    logging::limited(LogLevel::kWarn, RateKey::kNotSpilled,
                     "[spill] mode = \"managed\", but device {} has no concurrent managed access: "
                     "spilling to the pinned host pool instead",
                     request.device);
  }
  if (mode != SpillMode::kHost && managed) chain.add(managed_);
  if ((mode != SpillMode::kManaged || !managed) && host) chain.add(host_);
  return chain;
}

void SpillPlacement::explain(const tiers::SpillTier& tier, const tiers::SpillOutcome& outcome,
                             const SpillRequest& request, std::string& why) const {
  why += std::string(why.empty() ? "" : "; ") + tier.name() + ": ";
  switch (outcome.refusal) {
    case tiers::SpillRefusal::kLockedMemoryLimit:
      why +=
          "pinned memory would exceed RLIMIT_MEMLOCK (raise it with `ulimit -l` or "
          "`--ulimit memlock=-1` for a container, or give [spill] host_limit as a size, "
          "which replaces it)";
      return;
    case tiers::SpillRefusal::kHostLimit:
      why += host_limit_refusal(host_budget_, request.bytes);
      return;
    case tiers::SpillRefusal::kNone:
    case tiers::SpillRefusal::kDriver:
      why += "the driver refused (error " + std::to_string(static_cast<int>(outcome.result)) + ")";
      return;
  }
}

tiers::SpillTier* SpillPlacement::tier_holding(core::Route route) {
  for (tiers::SpillTier* tier : {&managed_, &host_}) {
    if (tier->route() == route) return tier;
  }
  return nullptr;
}

CUresult SpillPlacement::free(const core::Allocation& spilled, CUstream stream,
                              bool stream_ordered) noexcept {
  tiers::SpillTier* tier = tier_holding(spilled.route);
  if (tier == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // A stream-ordered free on a capturing stream would have to become part of the graph (a host
  // function), or wait for the stream (which invalidates the program's capture): refused, and
  // the allocation stays live, as the driver's refusal would leave it.
  if (stream_ordered) {
    bool capturing = false;
    if (const CUresult result = facts_.capturing(stream, capturing); result != CUDA_SUCCESS)
      return result;
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return tier->free_in_stream_order(spilled.key, spilled.bytes, spilled.device, stream);
  }
  return tier->free(spilled.key, spilled.bytes, spilled.device);
}

bool SpillPlacement::forget_if_lost(const core::Allocation& spilled) noexcept {
  tiers::SpillTier* tier = tier_holding(spilled.route);
  return tier != nullptr && tier->forget_if_lost(spilled.key, spilled.bytes);
}

}  // namespace vramspill::placement
