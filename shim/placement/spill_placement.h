// Where an allocation goes when it does not fit on the device ([spill] mode; shim/README.md,
// "Placement modes"): into a spill tier, or nowhere (CUDA_ERROR_OUT_OF_MEMORY), with a log line
// that says which and why. Tiers are reached through tiers/spill_tier.h and the driver through
// placement/spill_facts.h, so unit tests drive this with fakes of both.
//
// Note [What spills]
// Linear device memory spills: cuMemAlloc, cuMemAllocPitch, and stream-ordered allocations (which
// then exist at once; their cuMemFreeAsync is still ordered in the stream). cuMemAllocManaged
// spills only to managed memory, the one tier that keeps its semantics (prefetch, host access by
// the same pointer). Arrays do not spill: their memory has no host-backed equivalent. VMM
// physical memory (cuMemCreate) spills as a handle, not here: made host-located in auto mode
// (Note [Host-located VMM spills] in placement/vmm_spill.h). Nothing spills that could not live
// on the host:
//   - allocations smaller than [spill] min_size (small buffers tend to be hot);
//   - stream-ordered allocations made while their stream is being captured: a graph would bake
//     in the spilled address, and the graph's own free would never reach the spill tier (the
//     hooks send them to the driver before the budget is asked: Note [A captured request is the
//     graph's] in hooks/pool_allocation.h; this refusal stands for a caller that does not);
//   - anything once the host limit is reached: OUT_OF_MEMORY, not the kernel's OOM killer.
// Later, cuIpcGetMemHandle of a spilled pointer is refused (hooks/ipc_hooks.cpp).
//
// Note [The spill chain]
// The tiers a request tries, best first: `managed` tries managed memory, and the host pool only
// where the device has no concurrent managed access (it says so once); `host` tries the host
// pool; `auto` tries managed memory, then the host pool. Managed memory comes first because the
// driver migrates its hot pages to the device, where a host-pool block is read over the link on
// every access.
//
// Note [Stream-ordered spills beside a capture]
// A stream-ordered allocation on a stream that is not being captured is the program's right
// while another stream captures, in any mode; cuMemAllocManaged is not: a capture in global mode
// forbids it on every thread, and the driver would refuse it and invalidate that capture. So
// while any capture is in progress a stream-ordered spill skips managed memory: the host pool
// takes it, or, where the chain has nothing else (`managed` mode on a device with concurrent
// managed access), it is refused with CUDA_ERROR_OUT_OF_MEMORY and the log says why. The shim
// cannot tell a relaxed capture, which would allow it, from a global one. The look and the
// allocation are made holding the capture gate (SpillFacts::hold_off_captures()), so that no
// capture begins on another thread in between.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string>

#include "config/config.h"
#include "core/host_budget.h"
#include "core/ledger.h"
#include "placement/spill_facts.h"
#include "tiers/spill_tier.h"

namespace vramspill::placement {

struct SpillRequest {
  int device = 0;
  core::Route route = core::Route::kMemAlloc;  // the route the program called
  uint64_t bytes = 0;
  // Stream-ordered routes: the stream, checked for capture. Null for the others.
  CUstream stream = nullptr;
  bool stream_ordered = false;
  unsigned int managed_flags = CU_MEM_ATTACH_GLOBAL;  // cuMemAllocManaged's own flags
};

class SpillPlacement {
 public:
  // Each reference must outlive the placement (all are members of the shim's state).
  SpillPlacement(const SpillConfig& config, core::Ledger& ledger,
                 const core::HostBudget& host_budget, SpillFacts& facts, tiers::SpillTier& managed,
                 tiers::SpillTier& host) noexcept
      : config_(config),
        ledger_(ledger),
        host_budget_(host_budget),
        facts_(facts),
        managed_(managed),
        host_(host) {}
  SpillPlacement(const SpillPlacement&) = delete;
  SpillPlacement& operator=(const SpillPlacement&) = delete;

  // Places `request` in a spill tier and records it in the ledger; on failure returns
  // CUDA_ERROR_OUT_OF_MEMORY (or the driver's error for the request's stream) and logs why.
  // `refusal` is the ledger's explanation of why the device had no room (empty when the driver
  // itself ran out of memory).
  CUresult spill(const SpillRequest& request, const std::string& refusal,
                 CUdeviceptr* out) noexcept;

  // Frees a spilled allocation in its tier: at once (after its device's work), or, stream
  // ordered, once the work queued on `stream` has run. A stream-ordered free on a capturing
  // stream is refused (Note [What spills]) and the allocation stays live.
  CUresult free(const core::Allocation& spilled, CUstream stream, bool stream_ordered) noexcept;
  // After a reset of its device: tiers::SpillTier::forget_if_lost, in the spill's tier.
  bool forget_if_lost(const core::Allocation& spilled) noexcept;

 private:
  // The tiers to try, best first (Note [The spill chain]).
  struct Chain {
    tiers::SpillTier* tiers[2] = {};
    std::size_t count = 0;
    void add(tiers::SpillTier& tier) { tiers[count++] = &tier; }
    std::span<tiers::SpillTier* const> list() const { return {tiers, count}; }
  };
  Chain chain_for(const SpillRequest& request);
  // Appends to `why` the reason `tier` gave for refusing `request`.
  void explain(const tiers::SpillTier& tier, const tiers::SpillOutcome& outcome,
               const SpillRequest& request, std::string& why) const;
  // The spill's tier, by the route the ledger recorded; null for a route no tier holds.
  tiers::SpillTier* tier_holding(core::Route route);

  const SpillConfig& config_;
  core::Ledger& ledger_;
  const core::HostBudget& host_budget_;
  SpillFacts& facts_;
  tiers::SpillTier& managed_;
  tiers::SpillTier& host_;
};

}  // namespace vramspill::placement
