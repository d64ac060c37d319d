#include "hooks/spill_placement.h"

#include <array>
#include <span>
#include <string>

#include "util/bytes.h"
#include "driver/real_driver.h"
#include "hooks/devices.h"
#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

using core::Route;

enum class Tier : uint8_t { kManaged, kHost };

const char* tier_name(Tier tier) {
  return tier == Tier::kManaged ? "managed memory" : "the pinned host pool";
}

Route tier_route(Tier tier) {
  return tier == Tier::kManaged ? Route::kSpillManaged : Route::kSpillHost;
}

// The tiers to try for a request, best first (Note [What spills]).
struct TierChain {
  std::array<Tier, 2> tiers{};
  std::size_t count = 0;
  void add(Tier tier) { tiers[count++] = tier; }
  std::span<const Tier> list() const { return {tiers.data(), count}; }
};

TierChain tiers_for(ShimState& shim, const SpillRequest& request) {
  TierChain chain;
  const SpillMode mode = shim.config.spill.mode;
  if (mode == SpillMode::kOff) return chain;
  if (request.route == Route::kMemAllocManaged) {  // managed stays managed
    chain.add(Tier::kManaged);
    return chain;
  }
  const bool managed = shim.managed.supported(request.device);
  const bool host = shim.host.supported(request.device);
  if (mode == SpillMode::kManaged && !managed) {
    logging::limited(LogLevel::kWarn, RateKey::kNotSpilled,
                     "[spill] mode = \"managed\", but device {} has no concurrent managed access: "
                     "spilling to the pinned host pool instead",
                     request.device);
  }
  if (mode != SpillMode::kHost && managed) chain.add(Tier::kManaged);
  if (mode != SpillMode::kManaged || !managed) {
    if (host) chain.add(Tier::kHost);
  }
  return chain;
}

void log_spilled(const SpillRequest& request, Tier tier, bool over_budget) noexcept {
  try {
    logging::limited(LogLevel::kInfo, RateKey::kSpilled, "{} of {} on device {} spilled to {}{}",
                     core::route_name(request.route), format_bytes(request.bytes),
                     request.device, tier_name(tier),
                     over_budget ? " (over the device budget)"
                                 : " (the driver is out of device memory)");
  } catch (...) {  // the spill stands without its log line
  }
}

// Why the host budget refused `bytes`: it is full, or the request alone is larger than all of it.
std::string host_limit_text(const ShimState& shim, uint64_t bytes) {
  const uint64_t limit = shim.host_budget.limit();
  const std::string how_to_raise = "raise [spill] host_limit, or VRAMSPILL_SPILL_HOST_LIMIT)";
  if (bytes > limit)
    return "the request is larger than the whole host limit (" + format_bytes(limit) + "; " +
           how_to_raise;
  return "the host limit is reached (" + format_bytes(shim.host_budget.used()) + " of " +
         format_bytes(limit) + " in use; " + how_to_raise;
}

// Tries one tier; on failure appends the reason to `why`.
CUresult try_tier(ShimState& shim, Tier tier, const SpillRequest& request, CUdeviceptr* out,
                  std::string& why) {
  const uint64_t host_refusals = shim.host_budget.refusals();
  CUresult result = CUDA_SUCCESS;
  if (tier == Tier::kManaged) {
    result = shim.managed.allocate(request.device, request.bytes, request.managed_flags, out);
  } else {
    const uint64_t memlock_refusals = shim.host.memlock_refusals();
    result = shim.host.allocate(request.device, request.bytes, out);
    if (result != CUDA_SUCCESS && shim.host.memlock_refusals() != memlock_refusals) {
      why += std::string(why.empty() ? "" : "; ") + tier_name(tier) +
             ": pinned memory would exceed RLIMIT_MEMLOCK (raise it with `ulimit -l` or "
             "`--ulimit memlock=-1` for a container, or give [spill] host_limit as a size, "
             "which replaces it)";
      return result;
    }
  }
  if (result == CUDA_SUCCESS) return result;
  why += std::string(why.empty() ? "" : "; ") + tier_name(tier) + ": ";
  why += shim.host_budget.refusals() != host_refusals
             ? host_limit_text(shim, request.bytes)
             : "the driver refused (error " + std::to_string(static_cast<int>(result)) + ")";
  return result;
}

void log_not_spilled(const std::string& refusal, const SpillRequest& request,
                     const std::string& why) {
  logging::limited(LogLevel::kWarn, RateKey::kNotSpilled, "{}{}{} of {} on device {} not spilled: {}",
                   refusal, refusal.empty() ? "" : " ", core::route_name(request.route),
                   format_bytes(request.bytes), request.device, why);
}

}  // namespace

CUresult check_capture(CUstream stream, bool& capturing) {
  const auto is_capturing_stream = VRAMSPILL_REAL(cuStreamIsCapturing);
  if (is_capturing_stream == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult result = is_capturing_stream(stream, &status);
  capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  return result;
}

CUresult spill(ShimState& shim, const SpillRequest& request, const std::string& refusal,
               CUdeviceptr* out) noexcept {
  try {
    if (shim.config.spill.mode == SpillMode::kOff) {
      // The driver's own OUT_OF_MEMORY passes as it is, as without vramspill.
      if (!refusal.empty()) logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "{}", refusal);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (is_integrated(request.device)) {  // Note [Integrated devices] in hooks/devices.h
      log_not_spilled(refusal, request,
                      "the device is integrated (its memory is the host's), so spilling would "
                      "buy nothing");
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (request.bytes < shim.config.spill.min_size) {
      log_not_spilled(refusal, request,
                      "smaller than [spill] min_size (" +
                          format_bytes(shim.config.spill.min_size) + ")");
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (request.stream_ordered) {
      bool capturing = false;
      if (const CUresult result = check_capture(request.stream, capturing); result != CUDA_SUCCESS)
        return result;
      if (capturing) {
        log_not_spilled(refusal, request, "its stream is being captured into a graph");
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
    refresh_host_limit(shim);
    const TierChain chain = tiers_for(shim, request);
    std::string why;
    for (const Tier tier : chain.list()) {
      if (try_tier(shim, tier, request, out, why) != CUDA_SUCCESS) continue;
      // Recorded before anything that could throw: a spill that happened is never reported as
      // a failure (the allocation would be lost to the program and held forever).
      const core::Admission admission =
          shim.ledger.admit(request.device, tier_route(tier), request.bytes);
      shim.ledger.on_allocated(admission, *out, request.bytes);
      if (!refusal.empty()) shim.ledger.note_refusal_spilled(request.device);
      log_spilled(request, tier, !refusal.empty());
      return CUDA_SUCCESS;
    }
    if (chain.list().empty()) {
      why = "no spill tier works on this device (managed memory needs concurrent managed "
            "access; the host pool needs unified addressing and mapped host memory)";
    }
    log_not_spilled(refusal, request, why);
  } catch (...) {  // a log line could not be built: the answer stands without it
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult free_spilled(ShimState& shim, const core::Allocation& spilled, CUstream stream,
                      bool stream_ordered) noexcept {
  // A stream-ordered free on a capturing stream would have to become part of the graph (a host
  // function), or wait for the stream (which invalidates the program's capture): refused, and
  // the allocation stays live, as the driver's refusal would leave it.
  if (stream_ordered) {
    bool capturing = false;
    if (const CUresult result = check_capture(stream, capturing); result != CUDA_SUCCESS)
      return result;
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (spilled.route == Route::kSpillManaged) {
    return stream_ordered ? shim.managed.free_in_stream_order(spilled.key, spilled.bytes, stream)
                          : shim.managed.free(spilled.key, spilled.bytes);
  }
  if (!stream_ordered) return shim.host.free(spilled.key, spilled.device);
  return shim.host.free_in_stream_order(spilled.key, stream);
}

}  // namespace vramspill::hooks
