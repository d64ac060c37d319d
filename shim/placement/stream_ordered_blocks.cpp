#include "placement/stream_ordered_blocks.h"

#include <array>
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

// Note [Which stream a key names]
// A kept block is taken at once by a request on the stream it was freed on, and a stream found
// idle has reached the frees kept on it, so a key must name one stream. A stream the program made
// is its handle. The legacy stream and the per-thread default stream are each one handle in every
// context, but a stream of each context (each thread's, for the per-thread one): a block of
// device 0 freed on the legacy stream with device 0's context current and asked for on the legacy
// stream with device 1's (cuMemAllocFromPoolAsync may name another device's pool) is another
// stream's, and device 1's legacy stream found idle says nothing of device 0's. So their keys
// carry the context: the legacy stream's is the context's address with bit 1 set (a handle or a
// context is an aligned address, and 0 or a pointer is never one); the per-thread stream's an odd
// number drawn once per thread and context, never again (an address of the thread's own would
// come back with the next thread glibc gives the dead one's stack, which would take the dead
// thread's kept blocks as freed on its own stream).
constexpr uint64_t kLegacyBit = 2;

uint64_t legacy_stream_key(uint64_t context) noexcept { return context | kLegacyBit; }

uint64_t per_thread_stream_key(uint64_t context) noexcept {
  struct Drawn {
    uint64_t context = 0;
    uint64_t key = 0;  // 0: none drawn
  };
  static std::atomic<uint64_t> drawn{0};
  // A thread names a few contexts (one a device); a ninth forgets the first, whose stream is then
  // met as a new one, whose kept blocks wait for their frees to be reached.
  static thread_local std::array<Drawn, 8> keys{};
  static thread_local std::size_t next = 0;
  for (const Drawn& known : keys)
    if (known.key != 0 && known.context == context) return known.key;
  const uint64_t key = (drawn.fetch_add(1, std::memory_order_relaxed) + 1) << 1 | 1;
  keys[next++ % keys.size()] = {context, key};
  return key;
}

// The key of `stream` named with `context` current (Note [Which stream a key names]).
uint64_t reuse_stream_key(CUstream stream, uint64_t context) noexcept {
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return legacy_stream_key(context);
  if (stream == CU_STREAM_PER_THREAD) return per_thread_stream_key(context);
  return reinterpret_cast<uint64_t>(stream);
}

// The stream `key` names, if this thread may ask the driver about it with `context` current: a
// per-thread default stream only by its own thread, and it or the legacy stream only in their
// context.
std::optional<CUstream> stream_of_key(uint64_t key, uint64_t context) noexcept {
  if ((key & 1) != 0) {  // a per-thread stream's: this thread's key looked up only then
    if (key == per_thread_stream_key(context)) return CU_STREAM_PER_THREAD;
    return std::nullopt;
  }
  if ((key & kLegacyBit) != 0) {
    if (key == legacy_stream_key(context)) return CU_STREAM_LEGACY;
    return std::nullopt;
  }
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
          reuse_.take(device, granules, reuse_stream_key(stream, seam_.current_context()))) {
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
  // live blocks) to the host.
  const std::optional<CUresult> made = allocate_new(
      device, bytes, [&] { return blocks_.allocate_reusable(device, bytes, out); });
  // Not remembered (out of memory): it works, but its cuMemFreeAsync frees it.
  if (made && *made == CUDA_SUCCESS) (void)reuse_.made(*out);
  return made;
}

std::optional<CUresult> StreamOrderedBlocks::allocate_plain(int device, uint64_t bytes,
                                                            CUdeviceptr* out) noexcept {
  // A request too small for a tiered block is none: it takes no kept block's room.
  if (!remap_mover_keeps() || bytes < config_.tiered.min_size)
    return blocks_.allocate(device, bytes, out);
  find_idle_streams(device);
  return allocate_new(device, bytes, [&] { return blocks_.allocate(device, bytes, out); });
}

void StreamOrderedBlocks::make_room(int device, uint64_t bytes) noexcept {
  if (!remap_mover_keeps()) return;
  find_idle_streams(device);
  const uint64_t room = budgets_.device_room(device);
  if (room < bytes) give_back(device, tiers::GranuleArena::granules_for(bytes - room));
}

template <typename Allocate>
std::optional<CUresult> StreamOrderedBlocks::allocate_new(int device, uint64_t bytes,
                                                          Allocate allocate) noexcept {
  const uint64_t granules = tiers::GranuleArena::granules_for(bytes);
  const uint64_t room = budgets_.device_room(device) / tiers::kGranuleBytes;
  if (room < granules) give_back(device, granules - room);
  std::optional<CUresult> made = allocate();
  if (!made && give_back(device, UINT64_MAX)) made = allocate();
  return made;
}

bool StreamOrderedBlocks::remap_mover_keeps() const noexcept {
  return config_.spill.mode == SpillMode::kTiered &&
         config_.tiered.stream_ordered == StreamOrderedMode::kArena &&
         config_.tiered.mover == TieredMover::kRemap;
}

bool StreamOrderedBlocks::keep(const core::Allocation& block, CUstream stream) noexcept {
  const uint64_t ticket =
      reuse_.keep(block.device, block.key, tiers::GranuleArena::granules_for(block.bytes),
                  reuse_stream_key(stream, seam_.current_context()), kept_limit(block.device));
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
  std::vector<uint64_t> unreached =
      reuse_.stream_ended(reuse_stream_key(stream, seam_.current_context()));
  if (unreached.empty()) return;
  auto* reached = new (std::nothrow) FreesReached{&reuse_, std::move(unreached)};
  if (reached != nullptr && !seam_.queue_host_function(stream, &FreesReached::run, reached))
    delete reached;  // each waits for its own host function, as before
}

void StreamOrderedBlocks::all_streams_ended() noexcept {
  const std::unique_lock no_questions(questions_);
  reuse_.all_streams_ended();
}

void StreamOrderedBlocks::forget_kept(int device) noexcept {
  for (const tiers::StreamOrderedReuse::Block& kept : reuse_.withdraw_all(device))
    blocks_.forget_lost(device, kept.base);
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
// when the driver's thread runs them. A per-thread default stream is asked only by its own thread,
// and it and the legacy stream only in their context.
void StreamOrderedBlocks::find_idle_streams(int device) noexcept {
  constexpr std::size_t kMostStreams = 8;  // a query each, per request that reaches here
  const uint64_t context = seam_.current_context();
  // Another thread may be destroying one of these streams: asked only while none ends.
  const std::shared_lock asking(questions_);
  const tiers::StreamOrderedReuse::Unreached unreached =
      reuse_.unreached_streams(device, kMostStreams);
  for (const uint64_t key : unreached.streams) {
    const std::optional<CUstream> stream = stream_of_key(key, context);
    // A free kept on the stream after the question may be queued behind work the answer missed.
    if (stream && seam_.idle(*stream)) reuse_.stream_idle(key, unreached.later_tickets);
  }
}

}  // namespace vramspill::placement
