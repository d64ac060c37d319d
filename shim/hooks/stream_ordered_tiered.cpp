#include "hooks/stream_ordered_tiered.h"

#include <new>
#include <vector>

#include "driver/real_driver.h"
#include "hooks/pool_tracking.h"
#include "hooks/tiered_allocation.h"
#include "tiers/granule_arena.h"

namespace vramspill::hooks {
namespace {

// What the host function queued at a kept block's free hands back (Note [Reuse in stream order]).
struct FreeReached {
  tiers::StreamOrderedReuse* reuse;
  uint64_t ticket;

  static void CUDA_CB run(void* self) noexcept {
    // On the driver's callback thread: no CUDA calls, only the books.
    auto* reached = static_cast<FreeReached*>(self);
    reached->reuse->reached(reached->ticket);
    delete reached;
  }
};

// Gives `blocks` of `device`, kept blocks whose frees were reached and are kept no longer, back
// to the arena; whether there were any.
bool free_given_up(ShimState& shim, int device,
                   const std::vector<tiers::StreamOrderedReuse::Block>& blocks) {
  for (const tiers::StreamOrderedReuse::Block& block : blocks)
    (void)shim.tiered_blocks.free(device, block.base);
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

// Marks the frees reached on the streams of `device`'s kept blocks that have run all their work
// (cuStreamQuery), so that what the shim decides does not hang on when the driver's thread ran
// the host functions. A per-thread default stream is asked only by its own thread.
void find_idle_streams(ShimState& shim, int device) {
  constexpr std::size_t kMostStreams = 8;  // a query each, per request that reaches here
  const auto query = VRAMSPILL_REAL(cuStreamQuery);
  if (query == nullptr) return;
  const uint64_t own_default = reuse_stream_key(CU_STREAM_PER_THREAD);
  for (const uint64_t stream : shim.tiered_reuse.unreached_streams(device, kMostStreams)) {
    if ((stream & 1) != 0 && stream != own_default) continue;
    const CUstream handle =
        stream == own_default ? CU_STREAM_PER_THREAD : reinterpret_cast<CUstream>(stream);
    if (query(handle) == CUDA_SUCCESS) shim.tiered_reuse.stream_idle(stream);
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
      shim.config.tiered.mover == TieredMover::kPrefetch ||  // the pools serve them (not yet tiered)
      bytes < shim.config.tiered.min_size || !pool_books().plain(device, pool))
    return std::nullopt;
  const uint64_t granules = tiers::GranuleArena::granules_for(bytes);
  find_idle_streams(shim, device);
  if (const std::optional<tiers::StreamOrderedReuse::Taken> kept =
          shim.tiered_reuse.take(device, granules, reuse_stream_key(stream))) {
    if (kept->reached && on_host(shim, device, kept->base)) {
      // Its first launch would promote it, copying bytes nothing will read: a new block is made
      // on the device instead, where evicting kept blocks copies nothing (Note [Moves of dead
      // contents] in tiers/granule_arena.h).
      shim.tiered_reuse.give_up_taken(*kept);
      (void)shim.tiered_blocks.free(device, kept->base);
    } else {
      shim.tiered_blocks.reused(device, kept->base, bytes);
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
  std::optional<CUresult> made = shim.tiered_blocks.allocate(device, bytes, out);
  if (!made && free_given_up(shim, device, shim.tiered_reuse.give_up(device, UINT64_MAX)))
    made = shim.tiered_blocks.allocate(device, bytes, out);
  // Not remembered (out of memory): it works, but its cuMemFreeAsync frees it.
  if (made && *made == CUDA_SUCCESS) (void)shim.tiered_reuse.made(*out);
  return made;
}

void pool_trimmed(ShimState& shim, CUmemoryPool pool) noexcept {
  const std::optional<int> device = pool_books().device_of(pool);
  if (!device || *device == kHostLocatedPool || !pool_books().plain(*device, pool)) return;
  find_idle_streams(shim, *device);
  free_given_up(shim, *device, shim.tiered_reuse.give_up(*device, UINT64_MAX));
}

bool keep_for_reuse(ShimState& shim, const core::Allocation& block, CUstream stream) noexcept {
  const uint64_t ticket = shim.tiered_reuse.keep(
      block.device, block.key, tiers::GranuleArena::granules_for(block.bytes),
      reuse_stream_key(stream), kept_limit(shim, block.device));
  if (ticket == 0) return false;
  const auto launch_host_func = VRAMSPILL_REAL(cuLaunchHostFunc);
  auto* reached = new (std::nothrow) FreeReached{&shim.tiered_reuse, ticket};
  if (reached != nullptr && launch_host_func != nullptr &&
      launch_host_func(stream, &FreeReached::run, reached) == CUDA_SUCCESS)
    return true;
  delete reached;
  // Its stream could not say when it gets there: freed as any tiered block, unless a request on
  // the same stream has already had it.
  return !shim.tiered_reuse.withdraw(ticket).has_value();
}

}  // namespace vramspill::hooks
