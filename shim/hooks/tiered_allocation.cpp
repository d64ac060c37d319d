#include "hooks/tiered_allocation.h"

#include "driver/device_work.h"
#include "driver/real_driver.h"
#include "hooks/driver_tiered_seam.h"
#include "hooks/stream_ordered_tiered.h"
#include "telemetry/log.h"
#include "tiers/granule_arena.h"
#include "util/bytes.h"

namespace vramspill::hooks {
namespace {

// What stream-ordered requests got (Note [Stream-ordered requests in the arena]), or nothing
// when none was a tiered block.
std::string reuse_summary(const tiers::StreamOrderedReuseStats& reuse) {
  if (reuse.made == 0) return {};
  return fmt::format(
      "; stream-ordered: {} new blocks, {} freed blocks reused on their stream and {} on another, "
      "{} given back, {} granules kept",
      reuse.made, reuse.same_stream, reuse.other_stream, reuse.given_up, reuse.kept_granules);
}

// What the prefetch mover did (Note [The prefetch mover] in placement/prefetch_placement.h), or
// nothing with the remap mover.
std::string prefetch_summary(ShimState& shim) {
  if (shim.config.tiered.mover != TieredMover::kPrefetch) return {};
  const placement::PrefetchStats moved = shim.prefetch.stats();
  std::string held;
  for (int device : shim.ledger.devices()) {
    const placement::PrefetchPlacement::Held now = shim.prefetch.held(device);
    if (now.blocks != 0)
      held += fmt::format(", device {}: {} managed blocks, {} on the device ({} in part)", device,
                          now.blocks, now.on_device, now.in_part);
  }
  return fmt::format(
      "; prefetch mover: {} promoted in {} prefetches, {} evicted in {} prefetches ({} in part), "
      "{} promotions refused ({} held back by the card's free memory), {} blocks promoted ahead "
      "of their launches, {} prefetches the driver refused, {} dead blocks freed for room{}",
      format_bytes(moved.promoted_bytes), moved.promotions, format_bytes(moved.evicted_bytes),
      moved.evictions, moved.evicted_in_part, moved.promotions_refused, moved.held_by_the_card,
      moved.promoted_ahead, moved.failed_prefetches, moved.dead_freed, held);
}

}  // namespace

bool DriverTieredSeam::make_device_room(int device, uint64_t bytes) noexcept {
  if (shim_.prefetch.make_device_room(device, bytes)) return true;
  // With the prefetch mover, an arena exists only where it stood in for it: asking for room must
  // not make one (and, with it, a policy and the remap window's work at every launch).
  if (shim_.config.tiered.mover == TieredMover::kPrefetch &&
      shim_.tiered.arena_of(device) == nullptr)
    return false;
  // Note [Kept blocks give room to every request] in placement/stream_ordered_blocks.h.
  shim_.stream_ordered_blocks.make_room(device, bytes);
  return shim_.tiered.make_device_room(device, bytes);
}

bool DriverTieredSeam::forget_lost_block(const core::Allocation& block) noexcept {
  shim_.stream_ordered_blocks.forgotten(block.key);
  return shim_.tiered_blocks.forget_lost(block.device, block.key);
}

CUresult DriverTieredSeam::free_block(const core::Allocation& block,
                                      std::optional<CUstream> stream) noexcept {
  // A stream-ordered free into a graph would have to free when the graph runs: refused, as for
  // spilled blocks (Note [What spills] in placement/spill_placement.h); the block stays live.
  if (stream) {
    bool capturing = false;
    if (const CUresult checked = shim_.spill_facts.capturing(*stream, capturing);
        checked != CUDA_SUCCESS)
      return checked;
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (stream) {
    if (keep_for_reuse(shim_, block, *stream)) return CUDA_SUCCESS;
    return shim_.tiered_frees.free_in_stream_order(block.key, block.bytes, block.device, *stream);
  }
  shim_.stream_ordered_blocks.forgotten(block.key);
  if (const CUresult waited = driver::synchronize_device(block.device); waited != CUDA_SUCCESS)
    return waited;
  return free_tiered_block_now(&shim_, block.key, block.bytes, block.device);
}

// The block's own device, not the current one: a program may free any device's memory with
// another device current, as the driver allows under unified addressing.
CUresult free_tiered_block_now(void* shim_state, CUdeviceptr base, uint64_t /*bytes*/,
                               int device) {
  return static_cast<ShimState*>(shim_state)->tiered_blocks.free(device, base);
}

std::string tiered_summary(ShimState& shim) noexcept {
  if (shim.config.spill.mode != SpillMode::kTiered) return {};
  try {
    const placement::TieredStats moved = shim.tiered.stats();
    const core::LaunchCounts launches = shim.use.launch_counts();
    std::string held;
    uint64_t move_calls = 0;
    for (int device : shim.ledger.devices()) {
      const tiers::GranuleArena* arena = shim.tiered.arena_of(device);
      if (arena == nullptr) continue;
      const tiers::ArenaStats now = arena->stats();
      move_calls += now.move_vmm_calls;
      held += fmt::format(
          "; device {}: {} blocks on {} device and {} host granules ({} and {} "
          "pooled, {} with homes), {} VMM calls",
          device, now.blocks, now.device_granules, now.host_granules, now.pooled_device_granules,
          now.pooled_host_granules, now.homes, now.vmm_calls);
    }
    // What a move costs the host is mostly its VMM calls (Note [Granule homes] in
    // tiers/granule_homes.h); the rate is over the windows' wall-clock time, which on simcuda is
    // its own CPU's and not modeled.
    const uint64_t moved_bytes =
        (moved.evicted_granules + moved.promoted_granules) * tiers::kGranuleBytes;
    const std::string cost =
        moved_bytes == 0
            ? std::string()
            : fmt::format(", moves made {} VMM calls ({:.0f} per GiB moved) and ran at {:.2f} GB/s "
                          "over the windows' wall-clock time",
                          move_calls,
                          static_cast<double>(move_calls) * double(1 << 30) /
                              static_cast<double>(moved_bytes),
                          moved.window_nanoseconds == 0
                              ? 0.0
                              : static_cast<double>(moved_bytes) /
                                    static_cast<double>(moved.window_nanoseconds));
    // Note [The tracked window]: how many windows it kept narrow, and how many granules it
    // copied while the job ran (Notes [Staged promotions] and [Moves copied on the stream] in
    // tiers/granule_arena.h).
    const bool tracked = shim.config.tiered.window == WindowMode::kTracked;
    const std::string staged =
        tracked ? fmt::format(", {} granules staged while the job ran", moved.staged_granules)
                : std::string();
    const std::string narrow =
        tracked ? fmt::format(
                      ", before their moves {} waits for the blocks' streams alone and "
                      "{} for the whole device, {} granules copied with the window open",
                      moved.stream_waits, moved.device_waits, moved.streamed_granules)
                : std::string();
    return fmt::format(
        "tiered: {} evicted to the host in {} granules, {} promoted to the device "
        "in {} granules ({} blocks ahead of their launches{}), {} remap windows ({:.1f} ms{}){}, "
        "{} promotions refused, {} moves stopped by the driver, {} kernel launches ({} "
        "unreadable, taken as touching every block){}",
        format_bytes(moved.evicted_granules * tiers::kGranuleBytes), moved.evicted_granules,
        format_bytes(moved.promoted_granules * tiers::kGranuleBytes), moved.promoted_granules,
        moved.promoted_ahead, staged, moved.windows,
        static_cast<double>(moved.window_nanoseconds) / 1e6, narrow, cost, moved.promotions_refused,
        moved.failed_moves, launches.launches, launches.unreadable, held) +
           reuse_summary(shim.tiered_reuse.stats()) + prefetch_summary(shim);
  } catch (...) {  // no line rather than no exit
    return {};
  }
}

std::string tiered_rules_summary(ShimState& shim) noexcept {
  if (shim.config.spill.mode != SpillMode::kTiered) return {};
  try {
    return shim.tiered_rules.summary();
  } catch (...) {  // no line rather than no exit
    return {};
  }
}

}  // namespace vramspill::hooks
