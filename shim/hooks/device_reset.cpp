#include "hooks/device_reset.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>

#include "driver/device_work.h"
#include "driver/freed_memory.h"
#include "driver/primary_context.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"
#include "util/bytes.h"

namespace vramspill::hooks {
namespace {

// How long the frees the device's last work released may take to be made.
constexpr std::chrono::seconds kFreesPatience{2};

// The program's references to each device's primary context, as far as the shim saw them
// retained and released (Note [The last release of a primary context]).
struct ProgramReferences {
  std::mutex mutex;  // held across each retain and release, so the counts follow the driver's
  std::array<int, core::kMaxDevices> held{};
};

ProgramReferences& program_references() {
  static ProgramReferences* const counted = new ProgramReferences;  // outlives static destructors
  return *counted;
}

bool counted(CUdevice device) { return device >= 0 && device < core::kMaxDevices; }

}  // namespace

BeforeReset prepare_for_reset(ShimState& shim, int device) noexcept {
  (void)driver::synchronize_device_if_active(device);
  shim.tiered_frees.drain(kFreesPatience);
  shim.managed.drain_stream_ordered_frees(kFreesPatience);
  return {.held = shim.ledger.all_of(device), .primary = driver::active_primary_context(device)};
}

void forget_what_the_reset_freed(ShimState& shim, int device, const BeforeReset& before,
                                 std::string_view how) noexcept {
  {
    const auto changing = shim.captures.change();
    shim.captures.context_ended(before.primary);
  }
  // The pool and the movers first: a block given back below must not reach a region that is
  // gone, nor wait for a copy or an event that went with the context.
  const uint64_t lost_pool_blocks = shim.host.forget_lost_regions();
  shim.host.forget_context_given_up(device);
  shim.tiered_blocks.forget_context(device);
  shim.stream_ordered_blocks.forget_kept(device);
  const std::vector<core::Allocation>& held = before.held;
  const std::size_t gone = shim.admission.forget_what_went(
      held, placement::AdmissionFlow::ContextEnd::kPrimaryReset, &driver::memory_freed);
  const uint64_t unpinned = shim.program_pinned.forget_freed(&driver::memory_freed);
  shim.host_budget.release(unpinned);
  // A reset of a device the shim held nothing of (a program's last release at its end) is news
  // only to a debug log.
  logging::log(held.empty() && unpinned == 0 ? LogLevel::kDebug : LogLevel::kInfo,
               "device {} was reset ({}): {} of its {} allocations went with its primary context "
               "and left the budget, and {} of the program's page-locked memory",
               device, how, gone, held.size(), format_bytes(unpinned));
  // Blocks spilled for other devices lived in the pool's memory too, and nothing can bring it
  // back for them.
  const auto own = static_cast<uint64_t>(std::ranges::count_if(
      held, [](const core::Allocation& entry) { return entry.route == core::Route::kSpillHost; }));
  if (lost_pool_blocks > own)
    logging::warn(
        "resetting device {} freed the pinned host pool's memory, which {} blocks spilled for "
        "other devices still used: their contents are gone, and reaching them faults",
        device, lost_pool_blocks - own);
}

void forget_what_the_destroy_freed(ShimState& shim, int device,
                                   const std::vector<core::Allocation>& held) noexcept {
  const std::size_t gone = shim.admission.forget_what_went(
      held, placement::AdmissionFlow::ContextEnd::kCreatedDestroyed, &driver::memory_freed);
  const uint64_t unpinned = shim.program_pinned.forget_freed(&driver::memory_freed);
  shim.host_budget.release(unpinned);
  logging::log(gone == 0 && unpinned == 0 ? LogLevel::kDebug : LogLevel::kInfo,
               "a context of device {} was destroyed: {} of the device's {} allocations went with "
               "it and left the budget, and {} of the program's page-locked memory",
               device, gone, held.size(), format_bytes(unpinned));
}

CUresult program_retains_primary(CUcontext* primary, CUdevice device,
                                 CUresult (*real)(CUcontext*, CUdevice)) noexcept {
  ProgramReferences& references = program_references();
  const std::lock_guard lock(references.mutex);
  const CUresult result = real(primary, device);
  if (result == CUDA_SUCCESS && counted(device)) ++references.held[device];
  return result;
}

CUresult program_releases_primary(ShimState& shim, CUdevice device,
                                  CUresult (*real)(CUdevice)) noexcept {
  if (!counted(device)) return real(device);
  ProgramReferences& references = program_references();
  const std::lock_guard lock(references.mutex);
  int& held = references.held[device];
  if (held != 1) {
    const CUresult result = real(device);
    if (result == CUDA_SUCCESS && held > 0) --held;
    return result;
  }
  const BeforeReset before = prepare_for_reset(shim, device);
  const CUresult result = real(device);
  if (result != CUDA_SUCCESS) return result;
  held = 0;
  if (driver::reset_if_only_the_shim_holds(device))
    forget_what_the_reset_freed(shim, device, before,
                                "cuDevicePrimaryCtxRelease of its last reference");
  return result;
}

}  // namespace vramspill::hooks
