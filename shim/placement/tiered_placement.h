// Tiered placement: which granules of which blocks live on the device, decided as the job runs.
// A new block takes device granules while the budget allows, evicting cold blocks for room when
// the policy finds some, and host granules beyond; a launch that touches a block with host
// granules promotes it first when the policy agrees, with the blocks of the next launches that
// the policy names for the same window (Note [Promoting ahead]). The arena (tiers/granule_arena.h) carries
// the moves out inside the remap window (core/remap_window.h); the policy (policies/) only
// decides. The budgets are reached through a seam, so unit tests run this with fakes.
//
// Note [Tiered budgets]
// What a device's arena holds from the driver is what it costs: its device granules, live or
// pooled, count against the device budget, and its host granules against the host limit. An
// operation that may create granules first takes the most it could need from the budgets, and
// gives back what the arena did not use once it is done, so the budgets are never exceeded, not
// even for a moment. Pooled device granules are room like any other: an eviction pools the
// victims' device granules, and the allocation or promotion it was for takes them at once.
// Idle granules beyond the keep sizes are trimmed after each operation, and their budget given
// back. The budget is the device's, not tiered mode's alone: an allocation tiered mode does not
// take (a small one, a stream-ordered one, an array) that finds no room gets it from the arena,
// its pooled device granules first and then evictions (make_device_room()).
//
// Note [Tiered serialisation]
// One mutex per device serialises its placement decisions and the policy (which is not
// thread-safe), and the window serialises the moves of all devices. A launch that needs a
// promotion takes the mutex before its submission enters the window, never inside it (Note
// [Remap window]).
//
// Note [The policy's capacity]
// The device budget is shared with allocations tiered mode does not take, so what tiered blocks
// may hold on the device changes as the job runs: the granules they hold, plus the room the
// budget has left, plus the arena's pooled granules. The policy decides from its capacity (a
// block that fits the room left is promoted; learned promotes ahead only into room nothing needed
// holds), so before a launch's first decision about a block on the host it is told the capacity
// of the moment. A capacity fixed when the device was first seen would let the policy count room
// that other allocations have taken since, and make room by evicting blocks still needed.
//
// Note [No moves during a capture]
// A move waits for the device's work, and synchronising while a stream is being captured into a
// graph invalidates the capture (the driver refuses the call and the program's cuStreamEndCapture
// then fails). So while any capture is in progress (ArenaSource::may_synchronize) nothing moves:
// a new block takes device granules only from the room the budget has and host granules beyond
// it, and launches touch host granules in place. Addresses never change, so a graph that bakes in
// a tiered block's address stays right whatever moves later. A capture may begin on another
// thread after that look: the device's and the streams' waits are made holding the capture gate,
// and only while none is in progress (tiers/driver_granule_ops.cpp), or the move stops there.
//
// Note [Rules before the policy]
// A [[tiered.rule]] (placement/tiered_rules.h) decides for the blocks it matches before the
// policy is asked; the policy is still told of every event of those blocks, so its books stay
// whole, and is only not asked where the rule has decided:
// - pin: never a victim (make_room() keeps pinned blocks out of every choice). A pinned block
//   that has host granules (no room could be made when it was allocated, or a capture was in
//   progress) is promoted at its next launch without asking the policy, if room can be made.
// - prefer_host: all its granules are placed on the host and it is never promoted: every launch
//   touches it in place over the link, and the device is left to blocks that gain from it.
// - evict_first: when room is needed these blocks give it first, in address order, and the
//   policy chooses only for what they do not cover.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/memory_events.h"
#include "core/remap_window.h"
#include "policies/eviction_policy.h"
#include "placement/tracked_work.h"
#include "telemetry/nvtx.h"
#include "tiers/granule_arena.h"

namespace vramspill::placement {

// The device budget and the host limit, as tiered placement charges them (Note [Tiered
// budgets]). The shim's answers come from the ledger and the host budget.
class TieredBudgets {
 public:
  // Bytes `device` may still take under its budget.
  virtual uint64_t device_room(int device) noexcept = 0;
  virtual bool take_device(int device, uint64_t bytes) noexcept = 0;
  virtual void give_device(int device, uint64_t bytes) noexcept = 0;
  virtual bool take_host(uint64_t bytes) noexcept = 0;
  virtual void give_host(uint64_t bytes) noexcept = 0;
  // Reads again what `device`'s room rests on and may have changed unseen (stream-ordered pools'
  // memory, which the driver takes back at a synchronisation: Note [Refreshing pool figures] in
  // placement/pool_books.cpp), before a launch that touches blocks with host granules decides
  // what to bring in.
  virtual void read_device_figures_again(int /*device*/) noexcept {}

 protected:
  TieredBudgets() = default;
  ~TieredBudgets() = default;
  TieredBudgets(const TieredBudgets&) = default;
  TieredBudgets& operator=(const TieredBudgets&) = default;
};

// The arena of each device, made on first use (the shim's on the real driver; tests' on fakes).
class ArenaSource {
 public:
  // Null when the device cannot have one (the caller then places the allocation as before).
  virtual tiers::GranuleArena* arena(int device) noexcept = 0;
  // False while synchronising would break the program's work (Note [No moves during a capture]).
  virtual bool may_synchronize() noexcept = 0;

 protected:
  ArenaSource() = default;
  ~ArenaSource() = default;
  ArenaSource(const ArenaSource&) = default;
  ArenaSource& operator=(const ArenaSource&) = default;
};

struct TieredOptions {
  std::string policy = "lru";
  WindowMode window = WindowMode::kSafe;  // kTracked needs the use tracker
  // The prefetch mover's (Note [Admitting a promotion] in placement/promotion_admission.h).
  TieredAdmission admission = TieredAdmission::kWeighed;
  policies::InvariantMode invariant_mode = policies::InvariantMode::kCountAndDrop;
};

// Why the policy `options` names cannot be made ("" when it can), for a placement's error().
std::string policy_error(const TieredOptions& options) noexcept;
// A device's policy, told the room the device budget has now as its first capacity (Note [The
// policy's capacity]); null when it cannot be made.
std::unique_ptr<policies::EvictionPolicy> make_device_policy(const TieredOptions& options,
                                                             uint64_t room_bytes);

struct TieredStats {
  uint64_t evicted_granules = 0;    // moved to the host
  uint64_t promoted_granules = 0;   // moved to the device
  uint64_t windows = 0;             // remap windows this placement closed
  uint64_t window_nanoseconds = 0;  // from asking for each window to opening it again
  uint64_t promotions_refused = 0;  // the policy said touch in place, or no room could be made
  uint64_t failed_moves = 0;        // batches a driver error stopped part of (they stay put)
  // The tracked window's waits before moves (several may share a window): for the moving blocks'
  // streams alone, and for the whole device.
  uint64_t stream_waits = 0;
  uint64_t device_waits = 0;
  uint64_t promoted_ahead = 0;      // blocks promoted for a later launch (Note [Promoting ahead])
  // Of the granules promoted, those copied while the job ran (Note [Staged promotions]).
  uint64_t staged_granules = 0;
  // Of the granules moved either way, those whose copies the submissions' streams waited for
  // (Note [Moves copied on the stream] in tiers/granule_arena.h).
  uint64_t streamed_granules = 0;
};

class TieredPlacement {
 public:
  // The policy name is checked here: an unknown one leaves the placement unusable (error()).
  // `uses`: the use tracker the tracked window reads (Note [The tracked window]); without one,
  // every window is safe.
  TieredPlacement(TieredBudgets& budgets, ArenaSource& arenas, core::RemapWindow& window,
                  const TieredOptions& options, core::UseTracker* uses = nullptr) noexcept;
  TieredPlacement(const TieredPlacement&) = delete;
  TieredPlacement& operator=(const TieredPlacement&) = delete;

  // Why the placement cannot work (an unknown policy), or empty.
  const std::string& error() const noexcept { return error_; }

  // A block of `bytes` on `device` (Note [Tiered budgets]). The events are told of it, and of
  // its granules placed on the host (Note [A tiered block in the trace]). `rule`: the action of
  // the [[tiered.rule]] the block falls under, if one does (Note [Rules before the policy]).
  // CUDA_ERROR_OUT_OF_MEMORY with over_budgets when the host limit cannot take what the device
  // budget does not; CUDA_ERROR_NOT_SUPPORTED when the device has no arena; otherwise the
  // driver's error, or CUDA_ERROR_OUT_OF_MEMORY when the books could not grow.
  struct Allocated {
    CUresult result = CUDA_SUCCESS;
    bool over_budgets = false;
  };
  Allocated allocate(int device, uint64_t bytes, CUdeviceptr* out,
                     std::optional<RuleAction> rule = std::nullopt) noexcept;

  // Another allocation of `device` needs `bytes` of room under the device budget: pooled device
  // granules go back to the driver, and blocks are evicted for more as the policy allows (Note
  // [Tiered budgets]). Whether the budget now has that much room.
  bool make_device_room(int device, uint64_t bytes) noexcept;

  // Frees the block at `base` on `device`; the caller has waited for the work that could touch
  // it (as cuMemFree does). CUDA_ERROR_INVALID_VALUE for an address that starts no block.
  CUresult free(int device, CUdeviceptr base) noexcept;
  // `device`'s primary context was reset: its arena's copies and lanes went with it
  // (tiers::GranuleArena::forget_context).
  void forget_context(int device) noexcept;

  // A launch is about to touch `blocks` (block bases, from use tracking): tells the policy, and
  // promotes the ones with host granules that the policy wants on the device, evicting others
  // for room. Called before the launch's submission enters the window.
  void before_launch(int device, uint64_t sequence, uint32_t stream,
                     std::span<const policies::BlockId> blocks) noexcept;

  // before_launch() for a submission whose blocks may be on any device: each device's arena
  // gets the blocks it holds.
  void before_submission(uint64_t sequence, uint32_t stream,
                         std::span<const policies::BlockId> blocks) noexcept;

  // Makes `use`'s stream wait for the copies in flight into the blocks it may touch (Note [Moves
  // copied on the stream] in tiers/granule_arena.h): inside the window, before its driver call.
  // `capturing`: a capture is in progress (Note [Copies and captures] in
  // tiers/driver_granule_ops.cpp).
  void order_after_copies(const core::SubmissionUse& use, bool capturing) noexcept;

  // The base of the live block whose range holds `address`, on any device.
  std::optional<CUdeviceptr> block_containing(CUdeviceptr address) noexcept;

  // The arena of `device`, if tiered placement made one (for the statistics).
  const tiers::GranuleArena* arena_of(int device) noexcept;

  TieredStats stats() const noexcept;

  // Who is told of every block's granules moving, and every submission's blocks, from now on; null:
  // nobody. `events` must outlive every later call.
  void set_events(core::MemoryEvents* events) noexcept {
    events_.store(events, std::memory_order_release);
  }

 private:
  struct Device {
    std::mutex mutex;  // Note [Tiered serialisation]
    tiers::GranuleArena* arena = nullptr;
    std::unique_ptr<policies::EvictionPolicy> policy;
    // The live blocks a rule matched, by base (Note [Rules before the policy]).
    std::map<policies::BlockId, RuleAction> ruled;
    // What the budgets were charged for this arena (Note [Tiered budgets]).
    uint64_t charged_device = 0;
    uint64_t charged_host = 0;
    uint64_t learning_changes = 0;  // the policy's, when last logged
  };
  static constexpr std::size_t kDevices = 64;

  // The remap window of one operation: closed at its first move and opened again when the
  // operation ends, so that the evictions that make room and the promotions they make room for
  // share one window (one drain of the device's work, one wait for the blocks' last uses), and
  // no other thread's work slips in between them. Counted in the stats as one window.
  class MoveWindow {
   public:
    explicit MoveWindow(TieredPlacement& placement) noexcept : placement_(placement) {}
    ~MoveWindow();
    MoveWindow(const MoveWindow&) = delete;
    MoveWindow& operator=(const MoveWindow&) = delete;

    // Closes the window, if this operation has not yet.
    const core::RemapWindow::Exclusive& closed() noexcept;
    // `arena` evicted ahead (Timing::kAhead): its batches ahead end with the window, and in the
    // safe window (`wait`) their copies are waited for before it opens again.
    void end_batches_ahead_before_opening(tiers::GranuleArena& arena, bool wait) noexcept {
      ahead_ = &arena;
      wait_for_ahead_ = wait;
    }

   private:
    struct Closed {
      explicit Closed(core::RemapWindow& window) noexcept;
      nvtx::RemapWindowRange range;  // around the closed window, for Nsight Systems
      core::RemapWindow::Exclusive exclusive;
    };
    TieredPlacement& placement_;
    tiers::GranuleArena* ahead_ = nullptr;
    bool wait_for_ahead_ = false;
    std::optional<Closed> closed_;
    std::chrono::steady_clock::time_point asked_;
  };

  Device* device_state(int device) noexcept;
  // Calls visit(device, state) for each device that has an arena, in ordinal order, until one
  // returns true; whether one did. Takes no lock and allocates nothing (the launch path).
  template <typename Visit>
  bool any_device(Visit&& visit);
  // Charges the budgets for up to `device_granules` and `host_granules` more granules than the
  // arena holds; false (nothing charged) when a budget says no.
  bool charge(int device, Device& state, uint64_t device_granules, uint64_t host_granules);
  // Charges what `state`'s arena holds beyond its charge: the granules a new block made where its
  // charge counted on pooled ones it could not take (those a copy may still use, beside a capture:
  // Note [Copies in flight beside a capture] in tiers/granule_arena.h). False when the budgets
  // refuse it.
  bool charge_the_rest(int device, Device& state);
  // Trims the arena and sets the charges to what it holds now.
  void settle(int device, Device& state);
  // Note [Held past the charge] (in the .cpp): the arena holds `device_bytes` and `host_bytes`,
  // more than was charged for one of them.
  void charge_what_was_not(int device, Device& state, uint64_t device_bytes, uint64_t host_bytes);
  // Tells the policy how many device granules tiered blocks may hold now (Note [The policy's
  // capacity]).
  void tell_policy_of_capacity(int device, Device& state);
  // Device granules usable without the budget growing: room left plus the arena's pooled ones.
  uint64_t usable_device_granules(int device, const Device& state);
  // Evicts blocks (none of `keep`, no pinned one) until `granules` device granules are pooled,
  // evict_first blocks before the policy's choice, as far as the host limit allows.
  void make_room(int device, Device& state, uint64_t granules,
                 std::span<const policies::BlockId> keep, MoveWindow& window);
  // Blocks to evict, in order; with `in_part`, the one the need ends in gives up only the
  // granules the need leaves, its last device granules (Note [Evicting part of a block] in
  // policies/eviction_policy.h), unless it is staged, which moves whole.
  struct Victims {
    std::vector<policies::BlockId> blocks;
    bool in_part = false;
    bool enough = true;  // they hold the granules asked for (policies::Victims::enough)
  };
  // Evicts `victims`, in order, until they have given up `granules` device granules, as far as
  // the host limit allows; `ahead` of the promotions the caller moves next in the window
  // (Timing::kAhead).
  void evict(int device, Device& state, const Victims& victims, uint64_t granules, bool ahead,
             MoveWindow& window);
  // The victims for `granules`: evict_first blocks, whole, then the policy's choice for the rest,
  // in part where the policy says so.
  Victims choose_victims(Device& state, uint64_t granules, std::span<const policies::BlockId> keep);
  // Adds to `promotions` (and to `keep`, so that room is not made from them) the blocks the
  // policy names ahead of their launches, past the launch's own promotions of `needed` granules
  // (Note [Promoting ahead]); the host granules they add.
  uint64_t promote_ahead(Device& state, uint64_t needed, std::vector<tiers::GranuleMove>& promotions,
                         std::vector<policies::BlockId>& keep);
  // Tells the policy, and the rules' books, of a new block of `granules`, `on_device` of them on
  // the device. False, with neither knowing it, when their books cannot grow: the caller frees the
  // block then, since one the policy does not know would never be evicted, and a launch touching
  // it would break the policy's contract.
  bool learn_of_new_block(Device& state, CUdeviceptr base, uint64_t granules, uint64_t on_device,
                          std::optional<RuleAction> rule) noexcept;
  void tell_of_allocation(int device, CUdeviceptr base, uint64_t bytes,
                          uint64_t host_granules) noexcept;
  // kNow: copied and remapped in the window; kStaged: promotions staged for later launches
  // (Note [Staged promotions] in tiers/granule_arena.h); kOnStream: remapped in the window and
  // copied on a stream the next submissions wait on (Note [Moves copied on the stream]); these
  // two in the tracked window only. kAhead: evictions whose copies the promotions moved next
  // overlap (Note [Evictions ahead of promotions] in tiers/granule_mover.h); in the safe window
  // the arena is settled before the window opens.
  // kFinish: the staged blocks among the moves are finished, and nothing else moves (Note
  // [Staged promotions] in tiers/granule_arena.h).
  enum class Timing : uint8_t { kNow, kStaged, kOnStream, kAhead, kFinish };
  tiers::MoveOutcome move(int device, Device& state, std::span<const tiers::GranuleMove> moves,
                          MoveWindow& window, Timing timing = Timing::kNow);
  // Tells `events` how many bytes of each block in `moves` moved, from the device granules each
  // had before them (`before`, in the same order).
  void tell_of_moves(core::MemoryEvents& events, int device, const Device& state,
                     std::span<const tiers::GranuleMove> moves,
                     std::span<const uint64_t> before) const;
  void tell_policy_of_moves(Device& state, std::span<const tiers::GranuleMove> moves);
  // Logs what the policy learned of the job when that changed (policies/learned.h).
  void log_learning(int device, Device& state);

  TieredBudgets& budgets_;
  ArenaSource& arenas_;
  core::RemapWindow& window_;
  const TieredOptions options_;
  std::optional<TrackedWork> tracked_;  // with [tiered] window = "tracked"
  std::string error_;
  std::mutex devices_mutex_;  // creating a Device
  std::array<std::unique_ptr<Device>, kDevices> devices_{};
  std::atomic<uint64_t> with_arenas_{0};  // bit d: devices_[d] is made (never unmade)
  mutable std::mutex stats_mutex_;
  TieredStats stats_;
  std::atomic<core::MemoryEvents*> events_{nullptr};
};

}  // namespace vramspill::placement
