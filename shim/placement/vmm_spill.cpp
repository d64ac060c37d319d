#include "placement/vmm_spill.h"

#include <optional>

#include "placement/spill_log.h"
#include "telemetry/log.h"
#include "telemetry/nvtx.h"
#include "util/bytes.h"

namespace vramspill::placement {
namespace {

using Kind = tiers::HostVmmLocation::Kind;

// "host-located VMM memory on NUMA node 0", for the log.
std::string describe(const CUmemLocation& location) {
  std::string text = "host-located VMM memory";
  if (location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    text += " on NUMA node " + std::to_string(location.id);
  return text;
}

}  // namespace

CUresult VmmSpill::spill(const VmmSpillRequest& request, const std::string& refusal,
                         CUmemGenericAllocationHandle* out) noexcept {
  // Note [A refused cuMemCreate that was invalid] in vmm_spill.h. Its flags must be 0 (cuda.h).
  if (request.flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult invalid = facts_.check_vmm_request(*request.prop, request.bytes);
      invalid != CUDA_SUCCESS)
    return invalid;
  bool made = false;
  try {
    if (!relocates_vmm_handles(config_.mode)) {
      // As before this tier existed: the ledger's refusal, or the driver's OUT_OF_MEMORY as it is.
      if (!refusal.empty()) logging::limited(LogLevel::kWarn, RateKey::kOverBudget, "{}", refusal);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const auto not_spilled = [&](const std::string& why) {
      log_not_spilled(refusal, core::Route::kMemCreate, request.bytes, request.device, why);
      return CUDA_ERROR_OUT_OF_MEMORY;
    };
    if (facts_.integrated(request.device)) {  // Note [Integrated devices] in hooks/devices.h
      return not_spilled(
          "the device is integrated (its memory is the host's), so spilling would buy nothing");
    }
    if (request.bytes < config_.min_size)
      return not_spilled("smaller than [spill] min_size (" + format_bytes(config_.min_size) + ")");
    if (const std::string why = kept_on_device(*request.prop); !why.empty())
      return not_spilled(why);
    CUmemLocation location{};
    if (const std::string why = no_location(request.device, *request.prop, location); !why.empty())
      return not_spilled(why);
    facts_.refresh_host_limit();
    if (!host_budget_.try_reserve(request.bytes))
      return not_spilled(host_limit_refusal(host_budget_, request.bytes));
    CUmemAllocationProp host_prop = *request.prop;
    host_prop.location = location;
    host_prop.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_NONE;
    host_prop.allocFlags.gpuDirectRDMACapable = 0;  // a device-memory hint (the Note)
    if (const CUresult result = tier_.create(out, request.bytes, host_prop, request.flags);
        result != CUDA_SUCCESS) {
      host_budget_.release(request.bytes);
      return not_spilled(describe(location) + ": the driver refused (error " +
                         std::to_string(static_cast<int>(result)) + ")");
    }
    // Recorded before anything that could throw: a spill that happened is never reported as a
    // failure (the handle would be lost to the program and held forever).
    const core::Admission admission =
        ledger_.admit(request.device, core::Route::kSpillVmmHost, request.bytes);
    ledger_.on_allocated(admission, *out, request.bytes);
    vmm_.created(*out);  // Note [VMM memory lives until its last mapping goes]
    made = true;
    if (!refusal.empty()) ledger_.note_over_budget_served(request.device);
    const std::string where = describe(location);
    log_spilled(core::Route::kMemCreate, request.bytes, request.device, where, !refusal.empty());
    nvtx::spilled(request.bytes, request.device, where);
    say_once(request, where);
    return CUDA_SUCCESS;
  } catch (...) {  // a log line could not be built: the answer stands without it
  }
  return made ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void VmmSpill::freed(const core::Allocation& spilled) noexcept {
  host_budget_.release(spilled.bytes);
}

void VmmSpill::multicast_device_added(uint64_t object) noexcept {
  if (!multicast_.device_added(object)) return;  // no room to remember it: its handles may spill
  if (!told_multicast_.exchange(true, std::memory_order_relaxed))
    logging::info(
        "the program uses multicast objects (NVLink SHARP, as NCCL's NVLS does): while one "
        "waits for its memory, cuMemCreate handles stay device memory, which is all a multicast "
        "object binds, and past the budget are refused rather than spilled (said once)");
}

void VmmSpill::bind_refused(uint64_t handle, CUresult result) noexcept {
  const std::optional<core::Allocation> found = ledger_.find(handle, core::KeySpace::kVmmHandle);
  if (!found || found->route != core::Route::kSpillVmmHost) return;
  logging::warn(
      "a bind of a {} handle to a multicast object refused (CUresult {}): vramspill made it "
      "host-located, over the budget of device {}, before a multicast object was waiting for "
      "memory, and a multicast object binds only device memory; give the job a larger [device] "
      "budget",
      format_bytes(found->bytes), static_cast<int>(result), found->device);
}

std::string VmmSpill::kept_on_device(const CUmemAllocationProp& prop) const {
  if (multicast_.waiting())
    return "a multicast object of the program waits for its memory, and binds only device memory";
  const auto handle_types = static_cast<unsigned int>(prop.requestedHandleTypes);
  if ((handle_types & ~static_cast<unsigned int>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0) {
    return "the program asked for exportable handles (requestedHandleTypes " +
           std::to_string(handle_types) +
           ") other than POSIX file descriptors, whose importers expect device memory";
  }
  if (prop.allocFlags.usage != 0) {
    return "the program asked for a usage of device memory (allocFlags.usage " +
           std::to_string(prop.allocFlags.usage) + ")";
  }
  return {};
}

void VmmSpill::say_once(const VmmSpillRequest& request, const std::string& where) {
  if ((config_.mode == SpillMode::kHost || config_.mode == SpillMode::kManaged) &&
      !told_mode_.exchange(true, std::memory_order_relaxed)) {
    logging::info(
        "[spill] mode = \"{}\" spills pointers only; cuMemCreate handles that do not fit go to "
        "{} instead, the only place off the device a handle can be mapped (said once)",
        kSpillModeNames[static_cast<std::size_t>(config_.mode)], where);
  }
  if (request.prop->allocFlags.gpuDirectRDMACapable != 0 &&
      !told_rdma_.exchange(true, std::memory_order_relaxed)) {
    logging::warn(
        "cuMemCreate handles that asked for GPUDirect RDMA (allocFlags.gpuDirectRDMACapable) may "
        "live on the host when they do not fit on device {}: such a handle is {}, made without "
        "the flag, and a network adapter that registers it through GPUDirect RDMA would find "
        "host memory (said once; leave such handles room under [device] budget to keep them on "
        "the device)",
        request.device, where);
  }
}

std::string VmmSpill::no_location(int device, const CUmemAllocationProp& prop,
                                  CUmemLocation& location) {
  const std::optional<tiers::HostVmmLocation> where = tier_.location(device);
  const std::string named = "device " + std::to_string(device);
  if (!where)
    return "the driver did not say whether " + named + " supports host-located VMM memory";
  if (where->kind == Kind::kHostNuma) {
    location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, where->numa_node};
    return {};
  }
  if (where->kind == Kind::kNone) {
    return named +
           " supports no host-located VMM memory (neither "
           "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED nor "
           "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)";
  }
  if (prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return "the program asked for POSIX file descriptor handles, and " + named +
           " has host-located VMM memory only outside NUMA nodes, which cannot be exported";
  }
  location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  return {};
}

}  // namespace vramspill::placement
