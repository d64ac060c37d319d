#include "placement/stream_ordered_blocks.h"

#include <atomic>
#include <new>
#include <utility>
#include <vector>

#include "tiers/granule_arena.h"

namespace vramspill::placement {
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

// The last host function queued on a stream the program destroys: the frees kept on it that were
// not reached yet are, once it runs.
struct FreesReached {
  tiers::StreamOrderedReuse* reuse;
  std::vector<uint64_t> tickets;

  static void CUDA_CB run(void* self) noexcept {
    auto* reached = static_cast<FreesReached*>(self);
    for (const uint64_t ticket : reached->tickets) reached->reuse->reached(ticket);
    delete reached;
  }
};

// The identity of `stream` for reuse in stream order: the legacy stream's handles as one, and the
// per-thread default stream as the calling thread's own.
uint64_t reuse_stream_key(CUstream stream) noexcept {
  if (stream == CU_STREAM_LEGACY) return 0;
  if (stream == CU_STREAM_PER_THREAD) {
    // Odd: never a stream handle (a pointer, or 0 to 2). Drawn once per thread, never again:
    // an address of the thread's own would come back with the next thread glibc gives the dead
    // one's stack, which would take the dead thread's kept blocks as freed on its own stream.
    static std::atomic<uint64_t> threads{0};
    static thread_local const uint64_t key =
        (threads.fetch_add(1, std::memory_order_relaxed) + 1) << 1 | 1;
    return key;
  }
  return reinterpret_cast<uint64_t>(stream);
}

// The stream reuse_stream_key() gave `key` for, if this thread may ask the driver about it: a
// per-thread default stream only by its own thread.
std::optional<CUstream> stream_of_key(uint64_t key, uint64_t own_default) noexcept {
  if (key == own_default) return CU_STREAM_PER_THREAD;
  if ((key & 1) != 0) return std::nullopt;
  return reinterpret_cast<CUstream>(key);
}

}  // namespace

std::optional<CUresult> StreamOrderedBlocks::allocate(int device, CUmemoryPool pool, uint64_t bytes,
                                                      CUstream stream, CUdeviceptr* out) noexcept {
  if (config_.spill.mode != SpillMode::kTiered ||
      config_.tiered.stream_ordered != StreamOrderedMode::kArena ||
      bytes < config_.tiered.min_size || !pools_.plain(device, pool))
    return std::nullopt;
  const uint64_t granules = tiers::GranuleArena::granules_for(bytes);
  find_idle_streams(device);
  if (const std::optional<tiers::StreamOrderedReuse::Taken> kept =
          reuse_.take(device, granules, reuse_stream_key(stream))) {
    // Its first launch would promote it, copying bytes nothing will read: a new block is made on
    // the device instead, where evicting kept blocks copies nothing (Note [Moves of dead
    // contents] in tiers/granule_arena.h), and a new managed block's pages are made where they
    // are first wanted. During a capture a managed one serves all the same.
    const auto give_up = [&] {
      reuse_.give_up_taken(*kept);
      return true;
    };
    if (!kept->reached || !blocks_.on_host(device, kept->base) ||
        !blocks_.free_unless_capturing(device, kept->base, give_up)) {
      blocks_.reused(device, kept->base, bytes);
      *out = kept->base;
      return CUDA_SUCCESS;
    }
  }
  // A new block. Where the budget has no room for it, kept blocks whose frees were reached go
  // back first: their granules are the room, and otherwise the new block would evict them (or
  // live blocks) to the host. All of them go back if the budgets refuse the block.
  const uint64_t room = budgets_.device_room(device) / tiers::kGranuleBytes;
  if (room < granules) give_back(device, granules - room);
  std::optional<CUresult> made = blocks_.allocate_reusable(device, bytes, out);
  if (!made && give_back(device, UINT64_MAX)) made = blocks_.allocate_reusable(device, bytes, out);
  // Not remembered (out of memory): it works, but its cuMemFreeAsync frees it.
  if (made && *made == CUDA_SUCCESS) (void)reuse_.made(*out);
  return made;
}

bool StreamOrderedBlocks::keep(const core::Allocation& block, CUstream stream) noexcept {
  const uint64_t ticket =
      reuse_.keep(block.device, block.key, tiers::GranuleArena::granules_for(block.bytes),
                  reuse_stream_key(stream), kept_limit(block.device));
  if (ticket == 0) return false;
  auto* reached = new (std::nothrow) FreeReached{&reuse_, ticket};
  if (reached != nullptr && seam_.queue_host_function(stream, &FreeReached::run, reached))
    return true;
  delete reached;
  if (config_.tiered.mover == TieredMover::kPrefetch) {
    // Not freed here: its cuMemFree could break a capture in progress (keep() in the header);
    // nor is its stream waited for during one (StreamOrderSeam::wait_for()).
    if (seam_.wait_for(stream)) reuse_.reached(ticket);
    return true;
  }
  // Its stream could not say when it gets there: freed as any tiered block, unless a request on
  // the same stream has already had it.
  return !reuse_.withdraw(ticket).has_value();
}

void StreamOrderedBlocks::pool_trimmed(CUmemoryPool pool) noexcept {
  const std::optional<int> device = pools_.device_of(pool);
  if (!device || *device == kHostLocatedPool || !pools_.plain(*device, pool)) return;
  // The prefetch mover's frees would break another stream's capture: the next trim has them
  // (and they test again as they free: Note [Managed memory and captures begun meanwhile]).
  if (config_.tiered.mover == TieredMover::kPrefetch && !blocks_.prefetch_may_move()) return;
  find_idle_streams(*device);
  give_back(*device, UINT64_MAX);
}

std::vector<uint64_t> StreamOrderedBlocks::dead() noexcept { return reuse_.reached_blocks(); }

bool StreamOrderedBlocks::is_dead(CUdeviceptr base) noexcept { return reuse_.is_reached(base); }

bool StreamOrderedBlocks::give_up_if_dead(CUdeviceptr base) noexcept {
  if (!reuse_.give_up_if_reached(base)) return false;
  blocks_.freed_by_the_mover(base);
  return true;
}

void StreamOrderedBlocks::stream_ended(CUstream stream) noexcept {
  const std::unique_lock no_questions(questions_);
  std::vector<uint64_t> unreached = reuse_.stream_ended(reuse_stream_key(stream));
  if (unreached.empty()) return;
  auto* reached = new (std::nothrow) FreesReached{&reuse_, std::move(unreached)};
  if (reached != nullptr && !seam_.queue_host_function(stream, &FreesReached::run, reached))
    delete reached;  // each waits for its own host function, as before
}

bool StreamOrderedBlocks::give_back(int device, uint64_t granules) noexcept {
  bool any = false;
  for (const Kept& block : reuse_.oldest_reached(device, granules)) {
    // Still kept, and reached, once its mover holds captures off: a request may have had it.
    const auto give_up = [&] { return reuse_.give_up_if_reached(block.base); };
    any = blocks_.free_unless_capturing(device, block.base, give_up) || any;
  }
  return any;
}

// Twice the budget, so that a job whose step holds up to twice the budget finds every block of
// its step again; what is kept beyond the device is in host granules, under the host limit.
uint64_t StreamOrderedBlocks::kept_limit(int device) const noexcept {
  return 2 * ledger_.snapshot(device).limit_bytes / tiers::kGranuleBytes;
}

// Asked, rather than left to the host functions, so that what the shim decides does not hang on
// when the driver's thread runs them. A per-thread default stream is asked only by its own thread.
void StreamOrderedBlocks::find_idle_streams(int device) noexcept {
  constexpr std::size_t kMostStreams = 8;  // a query each, per request that reaches here
  const uint64_t own_default = reuse_stream_key(CU_STREAM_PER_THREAD);
  // Another thread may be destroying one of these streams: asked only while none ends.
  const std::shared_lock asking(questions_);
  const tiers::StreamOrderedReuse::Unreached unreached =
      reuse_.unreached_streams(device, kMostStreams);
  for (const uint64_t key : unreached.streams) {
    const std::optional<CUstream> stream = stream_of_key(key, own_default);
    // A free kept on the stream after the question may be queued behind work the answer missed.
    if (stream && seam_.idle(*stream)) reuse_.stream_idle(key, unreached.later_tickets);
  }
}

}  // namespace vramspill::placement
