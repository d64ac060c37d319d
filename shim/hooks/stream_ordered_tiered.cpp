#include "hooks/stream_ordered_tiered.h"

#include <vector>

#include "driver/real_driver.h"
#include "hooks/pool_tracking.h"
#include "hooks/tiered_allocation.h"
#include "tiers/granule_arena.h"

namespace vramspill::hooks {
namespace {

// Gives `blocks` of `device`, kept blocks whose frees were reached and are kept no longer, back
// to the arena, with their events; whether there were any.
bool free_given_up(ShimState& shim, int device,
                   const std::vector<tiers::StreamOrderedReuse::Block>& blocks) {
  for (const tiers::StreamOrderedReuse::Block& block : blocks) {
    shim.submission_events.destroy(block.event);
    (void)free_tiered_block(shim, device, block.base);
  }
  return !blocks.empty();
}

// The most granules `device` keeps for reuse: twice its budget, so that a job whose step holds
// up to twice the budget finds every block of its step again; what is kept beyond the device is
// in host granules, under the host limit.
uint64_t kept_limit(ShimState& shim, int device) {
  return 2 * shim.ledger.snapshot(device).limit_bytes / tiers::kGranuleBytes;
}

// Whether any granule of the block at `base` is on the host.
bool on_host(ShimState& shim, int device, uint64_t base) {
  const tiers::GranuleArena* arena = shim.tiered.arena_of(device);
  if (arena == nullptr) return false;
  const std::optional<tiers::ArenaBlock> block = arena->block_containing(base);
  return block && block->host_granules() != 0;
}

// Marks reached the frees of `device`'s kept blocks whose events have passed (cuEventQuery), the
// oldest first (a query each: a GPU answers at once). An event the driver no longer knows (its context was destroyed, which waits for
// the context's work first) stands for work that is over.
void find_reached_frees(ShimState& shim, int device) {
  constexpr std::size_t kMostQueries = 8;  // per request that reaches here
  const auto query = VRAMSPILL_REAL(cuEventQuery);
  if (query == nullptr) return;
  for (const tiers::StreamOrderedReuse::Unreached& kept :
       shim.tiered_reuse.unreached(device, kMostQueries)) {
    if (query(reinterpret_cast<CUevent>(kept.event)) != CUDA_ERROR_NOT_READY)
      shim.tiered_reuse.reached(kept.ticket);
  }
}

}  // namespace

uint64_t reuse_stream_key(CUstream stream) noexcept {
  if (stream == CU_STREAM_LEGACY) return 0;
  if (stream == CU_STREAM_PER_THREAD) {
    // A thread's own address, odd: never a stream handle (a pointer, or 0 to 2), and distinct
    // while the thread lives.
    static thread_local const char self = 0;
    return reinterpret_cast<uint64_t>(&self) << 1 | 1;
  }
  return reinterpret_cast<uint64_t>(stream);
}

std::optional<CUresult> allocate_stream_ordered_tiered(ShimState& shim, int device,
                                                       CUmemoryPool pool, uint64_t bytes,
                                                       CUstream stream, CUdeviceptr* out) noexcept {
  if (shim.config.spill.mode != SpillMode::kTiered ||
      shim.config.tiered.stream_ordered != StreamOrderedMode::kArena ||
      bytes < shim.config.tiered.min_size || !plain_pool(device, pool))
    return std::nullopt;
  const uint64_t granules = tiers::GranuleArena::granules_for(bytes);
  find_reached_frees(shim, device);
  if (const std::optional<tiers::StreamOrderedReuse::Taken> kept =
          shim.tiered_reuse.take(device, granules, reuse_stream_key(stream))) {
    shim.submission_events.destroy(kept->event);
    if (kept->reached && on_host(shim, device, kept->base)) {
      // Its first launch would promote it, copying bytes nothing will read: a new block is made
      // on the device instead, where evicting kept blocks copies nothing (Note [Moves of dead
      // contents] in tiers/granule_arena.h).
      shim.tiered_reuse.give_up_taken(*kept);
      (void)free_tiered_block(shim, device, kept->base);
    } else {
      // Note [A tiered block in the books]: still tracked and in the arena since it was kept.
      shim.ledger.on_allocated(shim.ledger.admit(device, core::Route::kTiered, bytes), kept->base,
                               bytes);
      *out = kept->base;
      return CUDA_SUCCESS;
    }
  }
  // A new block. Where the budget has no room for it, kept blocks whose frees were reached go
  // back first: their granules are the room, and otherwise the new block would evict them (or
  // live blocks) to the host. All of them go back if the budgets refuse the block.
  const uint64_t room = shim.tiered_budgets.device_room(device) / tiers::kGranuleBytes;
  if (room < granules)
    free_given_up(shim, device, shim.tiered_reuse.give_up(device, granules - room));
  std::optional<CUresult> made = allocate_tiered(shim, device, bytes, out);
  if (!made && free_given_up(shim, device, shim.tiered_reuse.give_up(device, UINT64_MAX)))
    made = allocate_tiered(shim, device, bytes, out);
  // Not remembered (out of memory): it works, but its cuMemFreeAsync frees it.
  if (made && *made == CUDA_SUCCESS) (void)shim.tiered_reuse.made(*out);
  return made;
}

void pool_trimmed(ShimState& shim, CUmemoryPool pool) noexcept {
  const std::optional<int> device = pool_device(pool);
  if (!device || *device == kHostLocatedPool || !plain_pool(*device, pool)) return;
  find_reached_frees(shim, *device);
  free_given_up(shim, *device, shim.tiered_reuse.give_up(*device, UINT64_MAX));
}

bool keep_for_reuse(ShimState& shim, const core::Allocation& block, CUstream stream) noexcept {
  // Note [Reuse in stream order]: an event right after the free says when the stream gets there.
  // Without one the block is freed as any tiered block.
  const uint64_t event = shim.submission_events.create();
  if (event == 0) return false;
  if (!shim.submission_events.record(event, reinterpret_cast<uint64_t>(stream))) {
    shim.submission_events.destroy(event);
    return false;
  }
  const uint64_t ticket = shim.tiered_reuse.keep(
      block.device, block.key, tiers::GranuleArena::granules_for(block.bytes),
      reuse_stream_key(stream), event, kept_limit(shim, block.device));
  if (ticket == 0) shim.submission_events.destroy(event);
  return ticket != 0;
}

}  // namespace vramspill::hooks
