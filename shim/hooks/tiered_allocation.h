// Tiered mode in the hooks ([spill] mode = "tiered"; shim/README.md, "Tiered mode"): which
// allocations the granule arena takes and how they are recorded, freed and made resident before
// a submission reaches the driver. The decisions are tiered placement's
// (placement/tiered_placement.h); this is where the hooks hand them over.
//
// Note [A tiered block in the books]
// A tiered allocation is one block of the arena of its device. The ledger records it as
// Route::kTiered under its pointer, so frees, pointer queries and IPC find it like any other
// allocation, while the device budget counts the arena's granules instead of its bytes (Note
// [Tiered budgets]). The use tracker tracks its whole range of granules under its base, the id
// the policy and the arena know it by.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/ledger.h"
#include "hooks/shim_state.h"

namespace vramspill::hooks {

// A linear allocation of `bytes` on `device` (cuMemAlloc, or cuMemAllocPitch with its pitch
// applied), if tiered mode takes it: the result, with *out set on success. nullopt when tiered
// mode does not take it (another mode, smaller than [tiered] min_size, a device without an arena:
// Note [Where tiered mode runs] in hooks/tiered_arenas.h) or could not (the budgets or the driver
// refused it, which is logged once for each); the caller goes on as in auto mode.
std::optional<CUresult> allocate_tiered(ShimState& shim, int device, uint64_t bytes,
                                        CUdeviceptr* out) noexcept;

// Gives the block at `base` back to `device`'s arena at once: the caller knows that no work
// touches it any more (cuMemFree after its wait, or a kept block whose free was reached).
CUresult free_tiered_block(ShimState& shim, int device, CUdeviceptr base) noexcept;

// Tiered mode's figures for the exit summary: "tiered: ...", or empty in another mode.
std::string tiered_summary(ShimState& shim) noexcept;

// How many blocks each [[tiered.rule]] matched, for the exit summary: "tiered rules: ...", or
// empty in another mode or without rules.
std::string tiered_rules_summary(ShimState& shim) noexcept;

}  // namespace vramspill::hooks
