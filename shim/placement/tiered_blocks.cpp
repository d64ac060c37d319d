#include "placement/tiered_blocks.h"

#include "telemetry/log.h"
#include "tiers/granule_arena.h"
#include "util/bytes.h"

namespace vramspill::placement {
namespace {

// Its address is in the shim's code, whose frames a captured stack leaves out.
void in_the_shim() noexcept {}

}  // namespace

bool NativeCallSites::capture(CallStack& stack, std::string_view& why) noexcept {
  return capture_call_stack(reinterpret_cast<const void*>(&in_the_shim), stack, why);
}

std::optional<CUresult> TieredBlocks::allocate(int device, uint64_t bytes,
                                               CUdeviceptr* out) noexcept {
  return allocate_spanning(device, bytes, bytes, out);
}

std::optional<CUresult> TieredBlocks::allocate_reusable(int device, uint64_t bytes,
                                                        CUdeviceptr* out) noexcept {
  return allocate_spanning(device, bytes,
                           tiers::GranuleArena::granules_for(bytes) * tiers::kGranuleBytes, out);
}

std::optional<CUresult> TieredBlocks::allocate_spanning(int device, uint64_t bytes, uint64_t span,
                                                        CUdeviceptr* out) noexcept {
  if (config_.spill.mode != SpillMode::kTiered || bytes < config_.tiered.min_size)
    return std::nullopt;
  CUdeviceptr base = 0;
  const std::optional<RuleAction> rule = rules_.empty() ? std::nullopt : rule_for(bytes);
  if (allocate_prefetched(device, span, rule, &base) == CUDA_SUCCESS) {
    // A managed block is the driver's allocation of `span`, with no granules beyond it.
    record(device, base, bytes, span);
    *out = base;
    return CUDA_SUCCESS;
  }
  // Not the prefetch mover's (a capture in progress among the reasons: Note [Managed memory and
  // captures begun meanwhile] in placement/prefetch_placement.h): the remap mover's, maybe.
  const TieredPlacement::Allocated allocated = placement_.allocate(device, bytes, &base, rule);
  if (allocated.result == CUDA_ERROR_NOT_SUPPORTED) return std::nullopt;
  if (allocated.result != CUDA_SUCCESS) {
    explain(allocated, device, bytes);
    return std::nullopt;  // placed as auto mode would place it, by the caller's spill chain
  }
  record(device, base, bytes, tiers::GranuleArena::granules_for(bytes) * tiers::kGranuleBytes);
  *out = base;
  return CUDA_SUCCESS;
}

CUresult TieredBlocks::allocate_prefetched(int device, uint64_t bytes,
                                           std::optional<RuleAction> rule,
                                           CUdeviceptr* base) noexcept {
  if (config_.tiered.mover != TieredMover::kPrefetch) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult result = prefetch_.allocate(device, bytes, base, rule);
  if (result != CUDA_SUCCESS && result != CUDA_ERROR_NOT_SUPPORTED &&
      result != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && !said_not_prefetched_.exchange(true))
    logging::warn(
        "tiered allocation of {} on device {}: the prefetch mover could not make it managed "
        "memory (CUresult {}); it goes to the remap mover instead (said once)",
        format_bytes(bytes), device, static_cast<int>(result));
  return result;
}

void TieredBlocks::reused(int device, CUdeviceptr base, uint64_t bytes) noexcept {
  // Note [A tiered block in the books]: still tracked and in the arena since it was kept.
  ledger_.on_allocated(ledger_.admit(device, core::Route::kTiered, bytes), base, bytes);
}

CUresult TieredBlocks::free(int device, CUdeviceptr base) noexcept {
  // Untracked first: no submission may promote a block while its granules go back.
  use_.untrack(base);
  if (const std::optional<CUresult> freed = prefetch_.free(base)) return *freed;
  return placement_.free(device, base);
}

void TieredBlocks::forget_context(int device) noexcept {
  prefetch_.forget_context(device);
  placement_.forget_context(device);
}

bool TieredBlocks::forget_lost(int device, CUdeviceptr base) noexcept {
  use_.untrack(base);
  if (prefetch_.forget_lost(base)) return true;
  return placement_.free(device, base) == CUDA_SUCCESS;
}

bool TieredBlocks::on_host(int device, CUdeviceptr base) noexcept {
  if (const std::optional<bool> on_host = prefetch_.any_on_host(base)) return *on_host;
  const tiers::GranuleArena* arena = placement_.arena_of(device);
  if (arena == nullptr) return false;
  const std::optional<tiers::ArenaBlock> block = arena->block_containing(base);
  return block && block->host_granules() != 0;
}

std::optional<RuleAction> TieredBlocks::rule_for(uint64_t bytes) noexcept {
  CallStack stack;
  if (rules_.need_call_sites()) {
    std::string_view why;
    if (!call_sites_.capture(stack, why) && !said_no_stack_.exchange(true))
      logging::warn(
          "[[tiered.rule]] entries with a library or symbol pattern cannot match: no call "
          "stack ({}); rules by size alone still apply",
          why);
  }
  const TieredRule* rule = rules_.match(bytes, stack.view());
  if (rule == nullptr) return std::nullopt;
  logging::debug("tiered block of {} falls under the [[tiered.rule]] at {}: {}",
                 format_bytes(bytes), rule->place,
                 kRuleActionNames[static_cast<std::size_t>(rule->action)]);
  return rule->action;
}

void TieredBlocks::explain(const TieredPlacement::Allocated& refused, int device,
                           uint64_t bytes) noexcept {
  if (refused.over_budgets && !said_over_budgets_.exchange(true)) {
    logging::warn(
        "tiered allocation of {} on device {}: its granules fit neither the device budget nor "
        "the host limit ({} of {} left); placed as in auto mode instead (said once)",
        format_bytes(bytes), device, format_bytes(host_budget_.available()),
        format_bytes(host_budget_.limit()));
  } else if (!refused.over_budgets && !said_driver_refused_.exchange(true)) {
    logging::warn(
        "tiered allocation of {} on device {}: the driver refused its granules (CUresult {}); "
        "placed as in auto mode instead (said once)",
        format_bytes(bytes), device, static_cast<int>(refused.result));
  }
}

void TieredBlocks::record(int device, CUdeviceptr base, uint64_t bytes, uint64_t range) noexcept {
  ledger_.on_allocated(ledger_.admit(device, core::Route::kTiered, bytes), base, bytes);
  if (const core::TrackResult tracked = use_.track(base, range, base);
      tracked != core::TrackResult::kTracked)
    logging::debug("tiered block at {:#x} is not tracked ({}): launches reach it where it is", base,
                   static_cast<int>(tracked));
}

}  // namespace vramspill::placement
