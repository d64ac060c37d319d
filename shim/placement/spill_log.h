// The log lines of placement, shared by pointer spills (placement/spill_placement.h) and VMM
// spills (placement/vmm_spill.h), so that both read alike: "cuMemAlloc of 4.0 MiB on device 0
// spilled to managed memory (over the device budget)", "... not spilled: <why>".
#pragma once

#include <cstdint>
#include <string>

#include "core/host_budget.h"
#include "core/route.h"

namespace vramspill::placement {

// `route` is the one the program called; `where` names the tier ("managed memory").
// `over_budget`: the ledger refused the request (else the driver ran out of device memory).
void log_spilled(core::Route route, uint64_t bytes, int device, const std::string& where,
                 bool over_budget) noexcept;

// `refusal` is the ledger's explanation (empty when the driver itself ran out of memory); `why`
// says why no tier took the request. May throw (building the line).
void log_not_spilled(const std::string& refusal, core::Route route, uint64_t bytes, int device,
                     const std::string& why);

// Why the host budget has no room for `bytes`, and what to change. May throw.
std::string host_limit_refusal(const core::HostBudget& budget, uint64_t bytes);

}  // namespace vramspill::placement
