// The interface every eviction policy implements: told of allocations, frees, launches and moves,
// asked which blocks to evict and whether to promote one. Pure decision code: block ids and
// granule counts in, decisions out, no driver and nothing from shim/, so the same policy runs in
// the preloaded library and in a replay of a recorded trace (policies/README.md).
//
// The shape is RMM's memory resources: the public methods are not virtual; they check what comes
// in and what goes out, keep the books and count, and call the private virtual do_* that decide.
// A policy therefore cannot skip the checks, and the books and counters are the same for all.
//
// Note [Whole blocks move]
// A block is one tracked device allocation (at least 1 MiB), backed by 2 MiB granules that are
// each device- or host-located. Decisions name whole blocks: a victim gives up all its device
// granules, a promotion brings in all its host granules. Use tracking sees which allocations a
// launch reaches (a pointer anywhere inside counts), never which bytes the kernel reads, so a
// half-resident block runs a kernel at the speed of its host half while still taking device room;
// evicting half a block frees room without making anything faster. Whole blocks also keep the
// books at one entry per allocation and let the mover remap each block in one batch. The books
// still record a partial block (moved() reports what the mover achieved, which may fall short of
// what was asked), and a block larger than the whole budget is never promoted: it is touched in
// place. One exception, Note [Evicting part of a block].
//
// Note [Evicting part of a block]
// A caller that can evict part of a block (the arena evicts a block's last device granules
// first) may say so to choose_victims(); a policy that knows when each block is needed next
// (learned) then lets its last victim give up only what the need leaves (Victims::partial_last):
// the farthest-needed granules go and no more, as in Belady's MIN, which counts granules.
// Evicting all of a 256 MiB block for a 2 MiB need sends the rest to the host only to fetch it
// again at the block's next use; the part left on the device comes in with the rest at that use,
// as a promotion brings in all of a block's host granules (on the H200 job, learned fetched 1.17x
// MIN's bytes evicting whole blocks, 1.11x evicting the last in part; policies/README.md). The
// block is still decided on whole: promoted or touched in place with all its host granules. The
// replay offers it (Note [The replay's model] in tools/cli/trace_replay.h), and so do both of the
// shim's movers: the remap mover, whose arena moves any number of a block's granules (a staged
// block moves whole: shim/placement/tiered_placement.h), and the prefetch mover, which prefetches
// a block's last 2 MiB pages to the host (Note [The prefetch mover] in
// shim/placement/prefetch_placement.h).
//
// Note [Decisions are checked]
// The public wrappers hold every decision to the contract: victims distinct, live, holding device
// granules and not in `keep`, together enough for the need whenever the blocks outside `keep`
// hold enough; a promotion only of a block that fits the budget at all. Events must name live
// blocks (allocated: a new one) with consistent granule counts. What breaks the contract is
// handled as the InvariantMode says: in a user's job it is counted (stats().invalid_decisions or
// invalid_events), the bad victim or event dropped and the rest kept, so a policy bug costs speed,
// never the job; in the project's own tests it aborts at once with what broke, so the bug is found
// where it happens.
//
// Note [Promoting ahead]
// A launch that brings blocks in stops for a remap window: the safe window drains the whole
// device first, and every later launch that needs a block stops again. A policy that knows which
// blocks the next launches use (learned, once locked on the job's period) can name them while
// the window is open anyway, so that they come in with the launch's own blocks and their
// launches find them on the device: fewer stops, and those launches' promotions are not late.
// The tiered layer asks only when the launch at hand promotes something (asking otherwise would
// open windows that would not have been).
// What comes in ahead takes only room that nothing needed holds: room left under the budget, or
// blocks never used again. Displacing data that is needed, even later than the block brought in
// (Cao et al.'s "do no harm" rule for integrated prefetching), fetched more in all: on a loop
// over 1.5x the budget (tests/shim/tiered/compare_policies.py, training), learned went from 1.13x
// to 1.35x Belady's bytes and from 0.665 to 0.792 modeled ms a step, slower than managed mode.
// The victim the early fetch needs is data used again before the demand fetch would have come,
// while on demand the victim is the block just used. That trade pays only where a copy overlaps
// the kernels. With the tracked window a promotion ahead is now copied while the job runs (Note
// [Staged promotions] in tiers/granule_arena.h), and the rule was measured again with it (32 MiB
// budget, 6 steps, learned, modeled): training at 1.5x 1.52 ms a step against 1.07 on demand,
// at 3x 5.87 against 4.34; staging saved 2% over copying the same blocks in the window. The
// copies dominate simcuda's cost of these loops, so hiding some of them behind short kernels
// cannot pay for a third more bytes moved; a GPU whose kernels outlast their blocks' copies is
// where the rule could win, and that is not measured yet. These figures predate simcuda's
// charging of the driver's remapping calls (Note [Host call costs] in simcuda's
// core/host_call_cost.h), which makes every move dearer and so favours fetching less all the more.
//
// Not thread-safe: the caller serialises (the tiered layer holds its lock; a replay is one thread).
// Deterministic: no clocks and no randomness, so the same events give the same decisions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vramspill::policies {

using BlockId = uint64_t;

// What a broken contract does (Note [Decisions are checked]).
enum class InvariantMode : uint8_t {
  kCountAndDrop,  // a user's job: count it, drop the bad victim or event, carry on
  kAbort,         // the project's tests: print what broke to stderr and abort
};

struct PolicyOptions {
  uint64_t capacity_granules = 0;  // the device budget, in granules
  InvariantMode invariant_mode = InvariantMode::kCountAndDrop;
};

// What choose_victims() decided.
struct Victims {
  std::vector<BlockId> blocks;  // in the order the policy gave them up
  uint64_t granules = 0;        // the device granules they hold together
  // granules >= the need. False only when the blocks outside `keep` hold fewer granules than
  // needed: then `blocks` is what the policy would give up, and a caller that cannot use a
  // partial room (a promotion, a whole new block) should move none of them.
  bool enough = false;
  // The last victim the need reaches gives up only the granules the need leaves, its last device
  // granules (Note [Evicting part of a block]); false: every victim moves whole. Only when the
  // caller said it may.
  bool partial_last = false;
};

struct PolicyStats {
  uint64_t launches = 0;         // used() calls
  uint64_t victim_requests = 0;  // choose_victims() calls
  uint64_t victims_chosen = 0;   // valid victims returned
  uint64_t short_requests = 0;   // requests that could not be met (Victims::enough false)
  uint64_t promotions_agreed = 0;
  uint64_t promotions_refused = 0;
  uint64_t promotions_ahead = 0;   // valid blocks named by promote_ahead()
  uint64_t invalid_decisions = 0;  // the policy broke the contract; dropped
  uint64_t invalid_events = 0;     // the caller did; dropped
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  EvictionPolicy(const EvictionPolicy&) = delete;
  EvictionPolicy& operator=(const EvictionPolicy&) = delete;

  // The name the registry knows it by (policies/registry.h).
  std::string_view name() const noexcept { return do_name(); }

  // Events.
  // A new block of `granules` granules, all device-located or all host-located.
  void allocated(BlockId block, uint64_t granules, bool on_device);
  void freed(BlockId block);
  // One launch: its sequence number, its stream and every block it touches.
  void used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks);
  // The mover's report: `block` now holds `device_granules` granules on the device.
  void moved(BlockId block, uint64_t device_granules);
  // The device budget changed.
  void set_capacity(uint64_t capacity_granules) noexcept { capacity_granules_ = capacity_granules; }

  // Decisions.
  // Blocks to evict so that `granules_needed` device granules come free, none of them in `keep`
  // (the blocks the launch at hand needs). Asks nothing of the policy only for a need of zero.
  // `in_part`: the caller can evict part of the last victim (Note [Evicting part of a block]).
  Victims choose_victims(uint64_t granules_needed, std::span<const BlockId> keep,
                         bool in_part = false);
  // `block` has host granules and a launch touches it: bring it in first (true), or let the
  // kernel reach it in place over the link (false)? Asked after used() reported the launch, of
  // its blocks one at a time, before victims are chosen for those it agreed to, so a policy may
  // count the promotions it agreed to since used() and that no move has reported yet as coming
  // in (learned does: Note [A launch's promotions] in learned.h).
  bool should_promote(BlockId block);
  // Blocks with host granules to bring in now, for the launches that come next, soonest needed
  // first (Note [Promoting ahead]); none of `keep` (the launch at hand's blocks, just decided).
  // `room_taken`: device granules the launch at hand's own promotions take. Empty for a policy
  // that does not know what comes next.
  std::vector<BlockId> promote_ahead(uint64_t room_taken, std::span<const BlockId> keep);

  const PolicyStats& stats() const noexcept { return stats_; }

  // What the policy has come to know of the job, in words, for the log ("locked on a period of
  // 87 launches ..."); empty for a policy that learns nothing. learning_changes() counts the
  // times that changed, so that a caller can log each change without comparing words on every
  // launch.
  std::string learned_state() const { return do_learned_state(); }
  uint64_t learning_changes() const noexcept { return do_learning_changes(); }
  // Whether the policy plans with when blocks are used next (learned, once it has locked on the
  // job's period), and so weighs a promotion against what its victims are needed for: a caller
  // that would otherwise second-guess the policy's promotions (the prefetch mover's admission,
  // Note [Admitting a promotion] in shim/placement/promotion_admission.h) may trust these.
  bool knows_next_uses() const noexcept { return do_knows_next_uses(); }
  // What the last broken contract was ("" if none), for the caller's warning.
  std::string_view last_problem() const noexcept { return last_problem_; }

 protected:
  explicit EvictionPolicy(const PolicyOptions& options) noexcept
      : capacity_granules_(options.capacity_granules), mode_(options.invariant_mode) {}

  // The books, for the do_* below. Each event updates them before its do_* runs, so during
  // do_freed the block is already gone. A block that is not live has 0 granules.
  uint64_t granules(BlockId block) const noexcept;
  uint64_t device_granules(BlockId block) const noexcept;
  uint64_t capacity_granules() const noexcept { return capacity_granules_; }
  // During do_choose_victims: whether the caller can evict part of the last victim.
  bool may_evict_in_part() const noexcept { return may_evict_in_part_; }

 private:
  struct Books {
    uint64_t granules = 0;
    uint64_t device_granules = 0;
  };

  virtual std::string_view do_name() const noexcept = 0;
  // Leaves nothing of the block behind when it throws (the books drop it then too).
  virtual void do_allocated(BlockId block, uint64_t granules, bool on_device) = 0;
  virtual void do_freed(BlockId block) = 0;
  // `blocks` are all live (unknown ones were dropped), possibly repeated.
  virtual void do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) = 0;
  virtual void do_moved(BlockId block, uint64_t device_granules) = 0;
  virtual std::vector<BlockId> do_choose_victims(uint64_t granules_needed,
                                                 std::span<const BlockId> keep) = 0;
  virtual bool do_should_promote(BlockId block) = 0;
  // Whether the last victim gives up only part of its granules when the caller may evict in part
  // (Note [Evicting part of a block]); asked after each do_choose_victims.
  virtual bool do_evicts_in_part() const noexcept { return false; }
  virtual std::vector<BlockId> do_promote_ahead(uint64_t /*room_taken*/,
                                                std::span<const BlockId> /*keep*/) {
    return {};
  }
  virtual std::string do_learned_state() const { return {}; }
  virtual uint64_t do_learning_changes() const noexcept { return 0; }
  virtual bool do_knows_next_uses() const noexcept { return false; }

  // Counts a broken contract, or aborts (Note [Decisions are checked]). `problem` ends with
  // what `value` is ("...: block").
  void broken(uint64_t& counter, const char* problem, uint64_t value);
  Books* find(BlockId block) noexcept;

  std::unordered_map<BlockId, Books> books_;
  uint64_t device_granules_total_ = 0;
  uint64_t capacity_granules_ = 0;
  bool may_evict_in_part_ = false;
  InvariantMode mode_;
  PolicyStats stats_;
  char last_problem_[128] = {};
  std::vector<BlockId> scratch_;  // used()'s live blocks when some were dropped
};

}  // namespace vramspill::policies
