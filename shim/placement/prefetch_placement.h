// Tiered placement with the prefetch mover ([tiered] mover = "prefetch"): which blocks the
// policy has on the device, when each block is one managed allocation moved by the driver's
// prefetches. The decisions are the same policy's (policies/) as with the remap mover
// (placement/tiered_placement.h); the driver is reached through tiers::PrefetchOps, so unit tests
// run this with fakes.
//
// Note [The prefetch mover]
// A block is one cuMemAllocManaged allocation advised to prefer the host and to be accessed by
// its device: where it is not brought in, kernels read it over the link and the driver does not
// migrate it behind the policy's back. A promotion is a prefetch to the device, an eviction a
// prefetch to the host, each queued on a stream of the mover's own (two per device, Note [Two
// lanes]) after the work queued so far on the streams of the block's last uses (an event
// recorded on each, waited for on the device). The launch that needs a promoted block makes its
// own stream wait, on the device, for the promotions; nothing waits on the host, no remap window
// closes, the device is never drained. Which promotions that evict the policy gets is
// admission's say (Note [Admitting a promotion] in placement/promotion_admission.h).
// Correctness does not hang on any of it: managed memory is coherent, so a use the tracker missed
// (a pointer kept in device memory, an unreadable launch, a per-thread stream of another thread,
// which the mover's thread cannot name) costs a fault or a read over the link, never a wrong
// byte. That is why no window is needed.
// The books: each block has a count of its 2 MiB pages on the device, its first ones: all of
// them from the moment its promotion is queued, fewer once an eviction of its last ones is queued
// (a policy that knows when blocks are needed next, learned, lets its last victim give up only
// the pages a need leaves: Note [Evicting part of a block] in policies/eviction_policy.h), none
// once a whole eviction is. The device budget (TieredBudgets, the ledger's) counts exactly those
// pages, and the policy, the trace and PrefetchStats are told the pages each move takes across,
// as the remap mover tells the granules it moves. Its pages count against the host limit for its
// whole life: a managed page may be on the host whatever the books say.
// A promotion is also held to the card's free memory as the driver counts it: never prefetch to
// the device more than it has free, or the driver would evict other managed pages for room. The
// driver's figure lags the books by the promotions still queued, so with B the bytes the books
// have on the device, R those really there, F the free figure and q the promotions queued since
// the mover's streams were last seen idle, R >= B - min(q, B) (a queued promotion of a block
// since evicted is no longer in B), and the block's own evictions, which it then waits for (Note
// [Two lanes]), leave `leaving` bytes: B - leaving + need <= F + R holds whenever
// need + min(q, B) <= F + leaving, which is the test. It errs only towards refusing. All of these
// count pages: `need` is the promoted block's pages on the host, `leaving` the pages its victims
// give up, in part or whole, and q grows by each promotion's `need`.
//
// Note [Launches after a promotion]
// Every launch that touches a block whose promotion may still be queued waits for the mover's
// promotions, not only the launch that asked for it: a new block is brought in at its allocation,
// with no launch at hand, and a block one stream's launch promoted may be touched next by
// another stream's. Unordered, such a launch runs while its pages are on the way: on a GPU it
// faults them over itself or reads them over the link, and simcuda charges it for waiting
// (Note [Waiting for a prefetch] in its core/managed.cpp). A block stops arriving once the
// mover's streams are seen idle at one of its launches, or once an eviction sends all its pages
// to the host; one that evicts only its last pages leaves it arriving, as the first may still be
// on their way.
//
// Note [Two lanes]
// Promotions and evictions go on two streams of the mover's, as a GPU's copy engines move the
// two ways at once over a full-duplex link. On one stream, a promotion waited for its victims'
// evictions, and those for the victims' last uses: every launch that promoted paid for the bytes
// out and then the bytes in. On two, the promotion runs beside the evictions that made its room
// in the budget, so for a moment the device may hold those bytes too: the budget is the books',
// and the card's free memory is what must not be exceeded (the driver would evict other managed
// pages for room). So a promotion waits for the evictions queued before it only when the card
// cannot take it without their room (the test above with `leaving` 0). The orderings that keep
// the books true to the driver: an eviction waits for every promotion queued before it (one of
// its own block, not yet used, must not land after it; the others are done by then anyway, as
// the launch that last used the victim waited for them), and a promotion waits for its own
// block's last eviction, whole or of its last pages (tiers/driver_prefetch_ops.h keeps an event
// for each block, by its base, whatever part moved): a promotion names the whole block (Note
// [Promoting a block in part on the device]), and one that overtook the eviction of its last
// pages would leave them on the host with the books saying the device. Room made for another
// allocation waits for both streams on the host, so that the driver finds the room.
// simcuda charges each stream's prefetches on that stream's clock at the link's rate, both ways
// at once in full (assumed, its README's fidelity table, until tier_probe measures it on a GPU).
// Measured (modeled, compare_movers.py, 16 MiB budget): learned on the training workload at
// 1.5x went from 0.72x managed mode's step to 0.38x, at 3x from 0.65x to 0.35x, and on the H200
// trace's workload player from 638 ms a step to 324.
//
// A policy that knows which blocks the next launches use (learned, locked) names them after each
// launch, as with the remap mover (Note [Promoting ahead] in policies/eviction_policy.h), into
// room nothing needed holds. Here that costs no stop: their prefetches run on the mover's streams
// while the job's kernels do, and the launches that need them wait only for what is still on
// the way (Note [Launches after a promotion]).
// Stream-ordered requests are this mover's blocks too, kept for reuse at their frees, and those
// whose frees were reached are freed rather than evicted (Notes [Stream-ordered requests in the
// arena] and [Dead blocks and the prefetch mover] in placement/stream_ordered_blocks.h).
// Not yet (README, "Tiered mode"): moves during a stream capture (none: blocks are touched where
// they are, as with the remap mover).
//
// Note [Promoting a block in part on the device]
// The promotion of a block that an eviction in part left with pages on both sides brings in the
// rest, and its prefetch names the whole block, not only the pages on the host. A GPU's driver
// migrates only the pages not already where a prefetch sends them (the others are looked up and
// left; what looking them up costs is not measured here, tier_probe's prefetch rows would show
// it), and simcuda does the same: its prefetch moves and charges only the pages whose location
// differs (prefetch_managed in its core/managed.cpp). So the whole block costs no more than its
// host part on either, and it buys certainty: a page the driver moved off the device behind the
// books (its own eviction when the card is overfull, the known limit of the card check above, or
// a peer's migration: Note [Who may reach a managed block] in tiers/driver_prefetch_ops.h) comes
// back with the rest, so that afterwards every page is where the books say. The budget, the
// policy, the trace and PrefetchStats count only the pages that were on the host, as the remap
// mover counts the host granules a promotion brings in.
//
// Note [A free waits outside the lock]
// A block's cuMemFree must follow the prefetches of it still queued on the mover's streams, so
// free() waits for those streams on the host. It waits without the placement's lock, which every
// launch that names a managed block takes: a free on one thread would otherwise hold every other
// thread's launches for as long as the mover's queued work runs. Before it lets the lock go, the
// block is marked leaving and forgotten by the policy, the rules and admission, so nothing queues
// another prefetch of it meanwhile: no policy names it as a victim or ahead of a launch, and a
// launch that names it (the program's own race with its free) does not move it. Its budget and
// its books stay until the driver has it back, so the device is never charged less than it holds.
// The frees made for the mover's own needs (dead blocks, kept blocks given back) wait under the
// lock: they happen while it already holds the lock for a launch or an allocation. They pass
// over leaving blocks. The policy's capacity leaves out a leaving block's pages on the device,
// which it no longer holds, so that it plans no promotion ahead into room the budget lacks. A
// free whose wait or cuMemFree fails leaves the block the program's, so the policy and the rules
// are told of it again, with its pages on the device, and it moves as before.
//
// Note [Managed memory and captures begun meanwhile]
// A stream capture in global mode, on any thread, forbids cuMemAllocManaged and cuMemFree, and
// a request or free may come while another stream captures (cuMemAllocAsync is allowed then, and
// cuMemAlloc in relaxed mode, which the shim cannot tell from global). So a new block
// (allocate(): during a capture the remap mover makes it instead) and the frees of kept blocks (free_unless_capturing(), DeadBlocks) make or
// free managed memory only after testing
// that no capture is in progress, holding the capture gate shared from that test through the
// driver call, so that no capture begins in between (Note [A capture begun while a move is
// queued] in tiers/driver_prefetch_ops.h). Placement/stream_ordered_blocks.cpp also tests before it
// starts, but only to skip the work: a capture may begin right after that test.
// Every decision to move holds it the same way, from the test through each query, wait, record
// and free the move makes (PrefetchDevices::hold_if_may_move()): a launch's promotions and the
// question whether they have arrived, a new block's bring-in, the room made for another
// allocation and the wait for its evictions. The calls they make (the evictions, the dead-block
// frees, the mover's records on the program's streams) take it no more: their callers hold it.
// The gate is taken inside this placement's lock and never held around a call into the
// placement: a thread holding it that waited for the lock, while the lock's holder waited for the
// gate behind a capture about to begin, would deadlock. Nor does any thread take it twice
// (shared twice on one thread is undefined for std::shared_mutex, and deadlocks behind a waiting
// capture wherever readers wait for a waiting writer): make_locked's hold ends before the
// bring-in that follows takes it.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/capture_gate.h"
#include "core/memory_events.h"
#include "core/use_tracker.h"
#include "placement/promotion_admission.h"
#include "placement/tiered_placement.h"
#include "policies/registry.h"
#include "tiers/prefetch_ops.h"

namespace vramspill::placement {

// The prefetch mover's driver calls for each device, made on first use (the shim's on the real
// driver: hooks/prefetch_devices.h; tests' on fakes).
class PrefetchDevices {
 public:
  // Null when the device cannot have the prefetch mover (no concurrent managed access, or an
  // integrated device); the caller then tiers its blocks with the remap mover where it can.
  virtual tiers::PrefetchOps* ops(int device) noexcept = 0;
  // Whether moves may be made: a hold that owns its lock while no stream capture is in
  // progress, and keeps one from beginning for as long as it lives, through every query, wait,
  // record and free the move makes (Note [A capture begun while a move is queued] in
  // tiers/driver_prefetch_ops.h); an empty one while a capture is in progress, when nothing
  // moves (Note [No moves during a capture]): an event recorded on a capturing stream would be
  // captured into its graph, and in global mode a query or a wait from any thread breaks it.
  virtual core::CaptureGate::Hold hold_if_may_move() noexcept = 0;

 protected:
  PrefetchDevices() = default;
  ~PrefetchDevices() = default;
  PrefetchDevices(const PrefetchDevices&) = default;
  PrefetchDevices& operator=(const PrefetchDevices&) = default;
};

// Blocks whose contents nothing will read again (kept stream-ordered blocks whose frees were
// reached: Note [Dead blocks and the prefetch mover] in placement/stream_ordered_blocks.h): when
// the mover needs room, it frees those on the device before it evicts any other block, rather
// than prefetch their bytes to the host.
class DeadBlocks {
 public:
  // The bases of the blocks that are such blocks now, of any device and mover (their owner may
  // still take one back). Called with the mover's lock held, as is give_up_if_dead().
  virtual std::vector<uint64_t> dead() noexcept = 0;
  // Whether the block at `base` is such a block now: not worth bringing in.
  virtual bool is_dead(CUdeviceptr base) noexcept = 0;
  // Whether the block at `base` is still such a block; if so, its owner has let it go, no
  // submission names it any more, and the mover frees it now.
  virtual bool give_up_if_dead(CUdeviceptr base) noexcept = 0;

 protected:
  DeadBlocks() = default;
  ~DeadBlocks() = default;
  DeadBlocks(const DeadBlocks&) = default;
  DeadBlocks& operator=(const DeadBlocks&) = default;
};

struct PrefetchStats {
  uint64_t promotions = 0;          // prefetches to the device
  uint64_t promoted_bytes = 0;
  uint64_t evictions = 0;           // prefetches to the host
  uint64_t evicted_bytes = 0;
  // Of the evictions, those that left the block's first pages on the device (Note [Evicting
  // part of a block] in policies/eviction_policy.h).
  uint64_t evicted_in_part = 0;
  uint64_t promoted_ahead = 0;       // of the promotions, those for a later launch
  uint64_t promotions_refused = 0;  // the policy said touch in place, or no room could be made
  uint64_t not_admitted = 0;  // of those, not worth their victims (Note [Admitting a promotion])
  uint64_t held_by_the_card = 0;    // promotions the card's free memory could not take
  uint64_t failed_prefetches = 0;   // prefetches or orderings the driver refused
  uint64_t dead_freed = 0;          // dead blocks freed for room instead of evicted
};

class PrefetchPlacement {
 public:
  // The policy name is checked here: an unknown one leaves the placement unusable (error()).
  PrefetchPlacement(TieredBudgets& budgets, PrefetchDevices& devices,
                    const TieredOptions& options) noexcept;
  PrefetchPlacement(const PrefetchPlacement&) = delete;
  PrefetchPlacement& operator=(const PrefetchPlacement&) = delete;

  const std::string& error() const noexcept { return error_; }

  // A block of `bytes` on `device`: on the device where the budget and the card have room (or
  // the policy evicts for it), else on the host. `rule`: the action of the [[tiered.rule]] the
  // block falls under, if one does (Note [Rules before the policy] in
  // placement/tiered_placement.h, which this mover follows too). CUDA_ERROR_NOT_SUPPORTED when
  // the device cannot have the mover; CUDA_ERROR_OUT_OF_MEMORY when the host limit cannot take
  // it; CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and nothing made, while a stream capture is in
  // progress, which cuMemAllocManaged could break (Note [Managed memory and captures begun
  // meanwhile]); otherwise the driver's error.
  CUresult allocate(int device, uint64_t bytes, CUdeviceptr* out,
                    std::optional<RuleAction> rule = std::nullopt) noexcept;

  // Frees the block at `base`; the caller has waited for the program's work on it. nullopt when
  // `base` is not one of this placement's blocks.
  std::optional<CUresult> free(CUdeviceptr base) noexcept;
  // As free(), for a block whose owner gives it back in the program's stead (a kept
  // stream-ordered block), so that its cuMemFree must not break a stream capture in progress:
  // false, the block left as it is, while one is (Note [Managed memory and captures begun
  // meanwhile]), or when `let_go()`, asked last, says its owner keeps it after all; true once let
  // go and freed (or, should the driver refuse, the driver's, as with free()).
  template <typename LetGo>
  std::optional<bool> free_unless_capturing(CUdeviceptr base, LetGo let_go) noexcept;

  // `device`'s primary context was reset (Note [Resetting the device] in hooks/device_reset.h):
  // the mover's lanes went with it (tiers::PrefetchOps::forget_context).
  void forget_context(int device) noexcept;
  // The block at `base` went with a reset: taken off the books, its memory given back if the
  // reset left it (made in another context). False when `base` is not one of this placement's
  // blocks.
  bool forget_lost(CUdeviceptr base) noexcept;

  // A submission is about to reach the driver (`use`: its blocks, from use tracking): the policy
  // is told, the blocks it wants on the device are prefetched there, and the submission's stream
  // waits on the device for those prefetches. Nothing moves while a capture is in progress.
  void before_submission(const core::SubmissionUse& use) noexcept;

  // Another allocation of `device` needs `bytes` under the device budget: blocks are evicted for
  // it as the policy allows, and their prefetches to the host waited for before this returns (the
  // allocation that asked is the driver's at once, and the budget is never exceeded, not even for
  // a moment). Whether the budget now has that much room.
  bool make_device_room(int device, uint64_t bytes) noexcept;

  // The program is destroying `stream` (or, all_streams_ended(), a context): no move may wait
  // on it any more, as its handle may be gone or reused.
  void stream_ended(uint64_t stream) noexcept;
  void all_streams_ended() noexcept;

  // How much of the block at `base` the books have on the device, in whole 2 MiB pages, its
  // first ones (nullopt: no such block).
  std::optional<uint64_t> device_bytes(CUdeviceptr base) const noexcept;
  // Whether the books have any of the block at `base`'s pages on the host (nullopt: no such
  // block), as an arena block with host granules.
  std::optional<bool> any_on_host(CUdeviceptr base) const noexcept;

  // False while a stream capture is in progress, as of now (PrefetchDevices::hold_if_may_move()).
  bool may_move() noexcept { return devices_.hold_if_may_move().owns_lock(); }
  // How many blocks the placement holds, and of those how many the books have on the device,
  // wholly or in part (Note [Evicting part of a block] in policies/eviction_policy.h); their
  // whole 2 MiB pages on the device and on the host, as the budgets count them.
  struct Held {
    uint64_t blocks = 0;
    uint64_t on_device = 0;  // with pages on the device
    uint64_t in_part = 0;    // of those, with pages on the host too
    uint64_t device_bytes = 0;
    uint64_t host_bytes = 0;
  };
  Held held(int device) const noexcept;

  PrefetchStats stats() const noexcept;

  // Who is told of every block, its moves and the submissions that touch it, from now on; null:
  // nobody. `events` must outlive every later call. As with the remap mover (Note [A tiered block
  // in the trace] in placement/tiered_placement.cpp), a block is told under the lock, before any
  // move of it; it starts on the host (told as evicted right after), so bringing it in is a
  // promotion.
  void set_events(core::MemoryEvents* events) noexcept {
    events_.store(events, std::memory_order_release);
  }

  // Who gives up dead blocks for room (DeadBlocks); null, the default: nobody. Set before the
  // first block is made; `dead` must outlive every later call.
  void set_dead_blocks(DeadBlocks* dead) noexcept { dead_ = dead; }

 private:
  // The streams of a block's uses since it last moved, which its next move waits for; the
  // oldest are dropped beyond kLastStreams (their work then only overlaps the move).
  static constexpr std::size_t kLastStreams = 4;
  struct Block {
    int device = 0;
    uint64_t size = 0;   // the allocation's, which the prefetches name
    uint64_t bytes = 0;  // whole 2 MiB pages, as budgets and policy count it
    // Its first pages, those the books have on the device: none, all of `bytes`, or after an
    // eviction in part some (Note [Evicting part of a block] in policies/eviction_policy.h).
    uint64_t device_bytes = 0;
    // Its promotion may still be queued (Note [Launches after a promotion]).
    bool arriving = false;
    // Its program's free is waiting for the mover's prefetches (Note [A free waits outside the
    // lock]): nothing moves it or names it to the policy any more.
    bool leaving = false;
    std::optional<RuleAction> rule;  // the rule it fell under, if any
    std::array<uint64_t, kLastStreams> last_streams{};
    std::size_t streams = 0;
  };
  struct Device {
    tiers::PrefetchOps* ops = nullptr;
    std::unique_ptr<policies::EvictionPolicy> policy;
    uint64_t on_device_bytes = 0;  // what the budget is charged for this device's blocks
    uint64_t queued_in = 0;        // promotions maybe still queued (Note [The prefetch mover])
    // Of on_device_bytes, those of leaving blocks, which the policy no longer holds.
    uint64_t leaving_bytes = 0;
    std::map<policies::BlockId, RuleAction> ruled;  // the live blocks a rule matched
  };
  static constexpr std::size_t kDevices = 64;

  Device* device_state_locked(int device) noexcept;
  // Tells the policy how many granules its blocks may hold now (Note [The policy's capacity]).
  void tell_policy_of_capacity_locked(int device, Device& state) noexcept;
  // Forgets the promotions queued, if the mover's streams are idle.
  void forget_promotions_done_locked(Device& state) noexcept;
  // Whether the card can take `bytes` more once `leaving` bytes have left it.
  // `after_evictions`: whether the promotion waits for the evictions queued before it.
  bool card_takes_locked(Device& state, uint64_t bytes, uint64_t leaving,
                         bool after_evictions) noexcept;
  // Brings `id` to the device, evicting what the policy names (none of `keep`) for room. A
  // promotion `ahead` of its launch that finds no room is not counted as refused. This, and the
  // calls below that move or free, are made holding the capture gate while no capture is in
  // progress (Note [Managed memory and captures begun meanwhile]).
  bool bring_in_locked(policies::BlockId id, Block& block, std::span<const policies::BlockId> keep,
                       bool ahead = false);
  // Prefetches what the policy names for the launches to come (Note [Promoting ahead] in
  // policies/eviction_policy.h), after a launch of `keep` whose promotions are made.
  void promote_ahead_locked(Device& state, std::span<const policies::BlockId> keep);
  // Evicts the policy's victims until the budget has `bytes` of room; whether it has. For the
  // promotion of `promoting` (of `bytes`), only where the card takes it and the victims are
  // worth it (Note [Admitting a promotion]).
  bool make_room_locked(int device, Device& state, uint64_t bytes,
                        std::span<const policies::BlockId> keep,
                        std::optional<policies::BlockId> promoting);
  // Evicts the last `out` bytes of `block`'s pages on the device.
  bool evict_locked(policies::BlockId id, Block& block, uint64_t out) noexcept;
  // Frees dead blocks of `device` on the device (DeadBlocks), other than those the caller holds
  // (`keep`, `promoting`), until `bytes` are free; the bytes of the device's pages freed.
  uint64_t free_dead_locked(int device, uint64_t bytes, std::span<const policies::BlockId> keep,
                            std::optional<policies::BlockId> promoting) noexcept;
  // Whether the block `id` is dead (DeadBlocks): a promotion would copy bytes nothing reads.
  bool is_dead_locked(policies::BlockId id) noexcept;
  // A new block of `bytes` on `state`'s device (`device`), in the books as allocate() says:
  // cuMemAllocManaged, and neither it nor its release, should the books have no room, during a
  // capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
  CUresult make_locked(Device& state, int device, uint64_t bytes, std::optional<RuleAction> rule,
                       CUdeviceptr* out) noexcept;
  // Frees the block at `found`; the caller has waited for the program's work on it.
  CUresult free_locked(std::map<policies::BlockId, Block>::iterator found) noexcept;
  // free_locked() once the mover's prefetches were waited for: gives the block back to the
  // driver, then takes it off the books.
  CUresult release_locked(std::map<policies::BlockId, Block>::iterator found) noexcept;
  // Takes the block at `found`, whose memory the driver has back, off the books.
  void drop_locked(std::map<policies::BlockId, Block>::iterator found) noexcept;
  // The policy, the rules and admission forget the block `id` of `state`.
  void forget_locked(policies::BlockId id, Device& state) noexcept;
  // Tells the policy the block `id` now has `device_bytes` on the device. A policy's books may
  // grow as it is told (learned orders the blocks it plans with): out of memory there leaves
  // them behind the mover's, said once, rather than ending the process on a noexcept path.
  void tell_moved_locked(Device& state, policies::BlockId id, uint64_t device_bytes) noexcept;
  static void policy_out_of_memory() noexcept;
  // The program's free of `block` (`id`) failed: the program still has it, so it is the
  // policy's and the rules' again, with the pages it has on the device (Note [A free waits
  // outside the lock]).
  void take_back_locked(policies::BlockId id, Block& block) noexcept;
  static void note_use(Block& block, uint64_t stream) noexcept;

  TieredBudgets& budgets_;
  PrefetchDevices& devices_;
  const TieredOptions options_;
  std::string error_;
  mutable std::mutex mutex_;  // the books and every policy (which is not thread-safe)
  std::array<Device, kDevices> device_states_{};
  std::map<policies::BlockId, Block> blocks_;
  std::atomic<uint64_t> block_count_{0};  // the launch path's test, without the lock
  PrefetchStats stats_;
  PromotionAdmission admission_;
  std::atomic<core::MemoryEvents*> events_{nullptr};
  DeadBlocks* dead_ = nullptr;
};

template <typename LetGo>
std::optional<bool> PrefetchPlacement::free_unless_capturing(CUdeviceptr base,
                                                             LetGo let_go) noexcept {
  if (block_count_.load(std::memory_order_relaxed) == 0) return std::nullopt;
  const std::lock_guard lock(mutex_);
  const auto found = blocks_.find(base);
  if (found == blocks_.end()) return std::nullopt;
  // A leaving block is the program's free's to give back (Note [A free waits outside the lock]).
  if (found->second.leaving) return false;
  const auto captures_held_off = devices_.hold_if_may_move();
  if (!captures_held_off.owns_lock() || !let_go()) return false;
  (void)free_locked(found);
  return true;
}

}  // namespace vramspill::placement
