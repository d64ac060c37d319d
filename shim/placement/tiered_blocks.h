// Which linear allocations tiered mode takes ([spill] mode = "tiered"; shim/README.md, "Tiered
// mode"), the [[tiered.rule]] each one falls under (placement/tiered_rules.h), and how a tiered
// block is written in the books. Where its granules go is tiered placement's
// (placement/tiered_placement.h); the stack a rule matches comes through CallSites, so unit tests
// give it with a fake (tests/shim/placement/tiered_blocks_test.cpp).
//
// Note [A tiered block in the books]
// A tiered allocation is one block of the arena of its device (or, with the prefetch mover, one
// managed allocation). The ledger records it as Route::kTiered under its pointer, so frees,
// pointer queries and IPC find it like any other allocation, while the device budget counts the
// arena's granules (or the pages the prefetch mover brought in) instead of its bytes (Note
// [Tiered budgets]). The use tracker tracks its whole range of granules (a managed block's bytes)
// under its base, the id the policy and the arena know it by.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

#include "config/config.h"
#include "core/host_budget.h"
#include "core/ledger.h"
#include "core/use_tracker.h"
#include "placement/prefetch_placement.h"
#include "placement/tiered_placement.h"
#include "placement/tiered_rules.h"
#include "util/call_stack.h"

namespace vramspill::placement {

// The stack that allocated the block being placed, for rules that name a library or a symbol.
class CallSites {
 public:
  // Fills `stack` with the allocating program's frames; false, with `why`, when there is none.
  virtual bool capture(CallStack& stack, std::string_view& why) noexcept = 0;

 protected:
  CallSites() = default;
  ~CallSites() = default;
  CallSites(const CallSites&) = default;
  CallSites& operator=(const CallSites&) = default;
};

// The native stack (Note [Call sites through libunwind] in util/call_stack.h), without the
// shim's own frames.
class NativeCallSites final : public CallSites {
 public:
  bool capture(CallStack& stack, std::string_view& why) noexcept override;
};

class TieredBlocks {
 public:
  // Each reference must outlive this (all are the shim state's).
  TieredBlocks(const Config& config, core::Ledger& ledger, core::UseTracker& use,
               const core::HostBudget& host_budget, TieredPlacement& placement,
               PrefetchPlacement& prefetch, TieredRules& rules, CallSites& call_sites) noexcept
      : config_(config),
        ledger_(ledger),
        use_(use),
        host_budget_(host_budget),
        placement_(placement),
        prefetch_(prefetch),
        rules_(rules),
        call_sites_(call_sites) {}
  TieredBlocks(const TieredBlocks&) = delete;
  TieredBlocks& operator=(const TieredBlocks&) = delete;

  // A linear allocation of `bytes` on `device`, a device the ledger knows (cuMemAlloc, or
  // cuMemAllocPitch with its pitch applied), if tiered mode takes it: the result, with *out set
  // on success. nullopt when tiered mode does not take it (another mode, smaller than [tiered]
  // min_size, a device without an arena: Note [Where tiered mode runs] in hooks/tiered_arenas.h)
  // or could not (the budgets or the driver refused it, which is logged once for each); the
  // caller goes on as in auto mode. With [tiered] mover = "prefetch" the block is managed memory
  // (Note [The prefetch mover] in placement/prefetch_placement.h), or, where the prefetch mover
  // cannot serve the device or the driver refuses the managed allocation (said once), the arena's:
  // the shim is never the reason a job fails.
  std::optional<CUresult> allocate(int device, uint64_t bytes, CUdeviceptr* out) noexcept;
  // As allocate(), for a block that may later serve any request of as many 2 MiB pages (Note
  // [Reuse in stream order] in tiers/stream_ordered_reuse.h): an arena block's range is whole
  // granules anyway, and with the prefetch mover its managed allocation spans those whole pages.
  std::optional<CUresult> allocate_reusable(int device, uint64_t bytes, CUdeviceptr* out) noexcept;

  // A block kept for reuse at its cuMemFreeAsync (Note [Reuse in stream order] in
  // tiers/stream_ordered_reuse.h) is the program's again, as a block of `bytes`.
  void reused(int device, CUdeviceptr base, uint64_t bytes) noexcept;

  // Gives the block at `base` back to the prefetch mover or `device`'s arena at once: the caller
  // knows that no work touches it any more (cuMemFree after its wait, or a kept block whose free
  // was reached).
  CUresult free(int device, CUdeviceptr base) noexcept;
  // A reset of `device` took its primary context (Note [Resetting the device] in
  // hooks/device_reset.h): the movers forget what went with it, then each of its blocks is
  // forgotten in turn with forget_lost().
  void forget_context(int device) noexcept;
  // The block at `base` went with a reset: a prefetch mover's is taken off the books (its
  // memory went), an arena's freed (VMM memory outlives contexts). Whether it was a block.
  bool forget_lost(int device, CUdeviceptr base) noexcept;
  // As free(), for a block its owner gives back in the program's stead (a kept stream-ordered
  // block): `let_go()`, asked last, says whether the owner still lets it go, and with the prefetch
  // mover a stream capture in progress keeps it too, since its cuMemFree would break the capture
  // (PrefetchPlacement::free_unless_capturing()). Whether it went.
  template <typename LetGo>
  bool free_unless_capturing(int device, CUdeviceptr base, LetGo let_go) noexcept;
  // The block at `base` is about to be freed by the prefetch mover itself (a dead block it frees
  // for room: DeadBlocks in placement/prefetch_placement.h): no submission may name it any more.
  void freed_by_the_mover(CUdeviceptr base) noexcept { use_.untrack(base); }

  // Whether the prefetch mover may make and free managed memory now: not while a stream capture
  // is in progress, where cuMemAllocManaged and cuMemFree would break a global-mode capture.
  bool prefetch_may_move() noexcept { return prefetch_.may_move(); }

  // Whether any of the block at `base` is on the host: with the prefetch mover, whether the books
  // have it there (not brought in, or evicted); in `device`'s arena, whether a granule of it is.
  bool on_host(int device, CUdeviceptr base) noexcept;

 private:
  // The action of the rule a new block of `bytes` falls under, from the stack that allocated it
  // when a rule names a library or a symbol.
  std::optional<RuleAction> rule_for(uint64_t bytes) noexcept;
  // Says, the first time each kind of failure happens, what failed and what the shim did instead.
  void explain(const TieredPlacement::Allocated& refused, int device, uint64_t bytes) noexcept;
  // allocate() of a block of `bytes` whose memory spans `span` bytes (at least `bytes`).
  std::optional<CUresult> allocate_spanning(int device, uint64_t bytes, uint64_t span,
                                            CUdeviceptr* out) noexcept;
  // With the prefetch mover, a block of managed memory at *base: CUDA_SUCCESS; or
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED during a capture; any other result when it did not
  // take it. Either way the remap mover may take it.
  CUresult allocate_prefetched(int device, uint64_t bytes, std::optional<RuleAction> rule,
                               CUdeviceptr* base) noexcept;
  // Note [A tiered block in the books]; `range`: what the use tracker tracks.
  void record(int device, CUdeviceptr base, uint64_t bytes, uint64_t range) noexcept;

  const Config& config_;
  core::Ledger& ledger_;
  core::UseTracker& use_;
  const core::HostBudget& host_budget_;
  TieredPlacement& placement_;
  PrefetchPlacement& prefetch_;
  TieredRules& rules_;
  CallSites& call_sites_;
  std::atomic<bool> said_no_stack_{false};
  std::atomic<bool> said_over_budgets_{false};
  std::atomic<bool> said_driver_refused_{false};
  std::atomic<bool> said_not_prefetched_{false};
};

template <typename LetGo>
bool TieredBlocks::free_unless_capturing(int device, CUdeviceptr base, LetGo let_go) noexcept {
  // Untracked once let go, before its memory goes back (free()).
  const auto letting_go = [&] {
    if (!let_go()) return false;
    use_.untrack(base);
    return true;
  };
  if (const std::optional<bool> freed = prefetch_.free_unless_capturing(base, letting_go))
    return *freed;
  if (!letting_go()) return false;
  (void)placement_.free(device, base);
  return true;
}

}  // namespace vramspill::placement
