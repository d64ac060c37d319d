// Tiered mode in the hooks ([spill] mode = "tiered"; shim/README.md, "Tiered mode"): what the
// driver does for a tiered block the program frees (DriverTieredSeam in hooks/driver_tiered_seam.h,
// free_tiered_block_now() in hooks/shim_state.h), and tiered mode's lines of the exit summary.
// Which allocations tiered mode takes and how they are recorded is placement/tiered_blocks.h;
// where their granules live, placement/tiered_placement.h.
#pragma once

#include <string>

#include "hooks/shim_state.h"

namespace vramspill::hooks {

// Tiered mode's figures for the exit summary: "tiered: ...", or empty in another mode.
std::string tiered_summary(ShimState& shim) noexcept;

// How many blocks each [[tiered.rule]] matched, for the exit summary: "tiered rules: ...", or
// empty in another mode or without rules.
std::string tiered_rules_summary(ShimState& shim) noexcept;

}  // namespace vramspill::hooks
