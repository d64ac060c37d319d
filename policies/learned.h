// learned: finds the period of the job's launches and, once the launches follow it, plans as
// Belady's MIN would with the last period as the future; until then, and again whenever the
// launches stop repeating, evicts by a guess at the step where it has one, else as lru.
//
// Note [Learning the period]
// Training repeats itself every step: the same allocations touched in the same order. The period
// is found from the blocks the launches touch (Note [Finding the period] in period_finder.h), and
// the policy is *locked* on it once 16 launches in a row have repeated those a period before with
// the same blocks, and verified as it plays; until then, and again whenever the launches stop
// following it, victims are chosen by a guess at the step (Note [Guessing the step]) and the
// other decisions are lru's (kept warm all along, Note [Keeping lru warm]). Locked, the plan is
// the last period, sliding: launch now + i is expected to touch what launch now + i - period
// touched, so a block's next use is a period after its first use among the last `period`
// launches, and a launch that differs from the one a period before (a rotated scratch block)
// changes the plan for its own blocks only.
// Why 16 launches and not two in a row, as once: on a GPU, with launches that named no blocks,
// two matching launches locked on periods of 2-3 launches all through the steps, each lock lost a
// few launches later, and left the model's hot blocks on the host (181 ms a step against lru's
// 6.7 ms); on a loop of 24 blocks it locked on a period of one launch. Why not a whole period, as
// before: a long step then waited a whole step more for its lock, all of it lru's (on the H200
// job, 1.22x MIN's bytes against 1.17x). A mismatch does not throw the plan away.
//
// Note [Planning with the period]
// Locked, a victim search evicts the blocks on the device whose next use is farthest away,
// never-used-again first, in lru's order (Belady's MIN; nothing says when those come back). A
// caller that can evict in part (the replay, the shim) has the last give up only as many granules
// as the need leaves (Note [Evicting part of a block] in eviction_policy.h): MIN's order over
// granules. A caller that moves whole victims gets back any victim, soonest needed first, whose
// room the others already cover: with blocks of every size, the farthest-first walk often ends on a
// large block that covers the need alone, and evicting the small ones taken before it as well only
// fetches them again (on the H200 job replayed with its future known, 1.13x MIN's bytes without
// this, 1.11x with it; in part, 1.17x to 1.11x with the launches learned as they come). Unlocked,
// lru's victims are evicted in part too where the caller can, for the same reason: granules no need
// asked for stay until one does (on the generated loops, at most 1.17x MIN against 1.31x when only
// a locked search did).
// A block on the host that a launch touches is brought in
// when it fits in the room left, or when its next use comes sooner than that of some block on
// the device that could make room for it (counting the launch's other promotions, Note [A
// launch's promotions]); otherwise it is touched in place over the link, as
// MIN-with-bypass would: bringing it in would evict data needed sooner, and a block used once a
// step costs one crossing in place against two (in, and out again) when moved. The blocks on the
// device are kept ordered by the launch of their next use, which changes only for the blocks of
// the launch at hand and of the launch a period before it, and lies within the period ahead: the
// order is a ring of `period` buckets, one per launch ahead, with a bitmap of the buckets that
// hold a block. A use moves a block between buckets in O(1) (one used once a period stays in its
// bucket, which comes round again), where an ordered set of 10^5 blocks cost a rebalance and
// cache misses per block. Within a launch the higher block id goes first, as ties always went. A
// victim search walks from the farthest bucket, sorting each it reaches (a launch's blocks, so
// O((victims + keep) log) when buckets hold a launch each); a promotion decision needs no order
// within a bucket, as it only sums what could make room. The blocks the plan never uses (farthest
// of all) sit outside the ring, by lru's recency (with the launches lru has not been told of:
// Note [Keeping lru warm]). Locking orders them all once.
//
// Note [A launch's promotions]
// The caller asks of a launch's blocks one at a time, after used() reported the launch, and then
// chooses victims for all it was told yes for at once (the tiered layer, the replay); the
// prefetch mover brings each in before it asks of the next. So an answer counts as coming in the
// promotions agreed since the launch was reported that no move has reported yet: two blocks that
// each fit alone are not both brought in where together they would evict a block needed sooner.
// With a budget of 12 granules, two blocks of 6 on the host and one of 4 on the device that the
// next launch uses, asking of each alone brought both in and the block of 4 out, to come back at
// once; now the second is touched in place. Victims go farthest-needed first, so the promotions
// take the room left and then the blocks needed last: a block comes in when the room and the
// blocks needed after it cover its granules and those promised before it. A promise ends with
// the block's move or free, or at the next launch. On the generated training loops
// (tests/cli/training_loops.h) learned fetched 0.79x MIN on average against 0.80x before, 1.06x
// against 1.07x cut to 4 steps; the H200 job replays as before (1.09x).
//
// Note [Guessing the step]
// The launches say roughly how long the step is well before a period qualifies. A job's first
// step differs from the next (the optimizer's state is created in it, and zeroed by launches of
// its own), so the second step repeats the first only in pieces, each at its own distance: on
// the H200 job (a step of 211 launches) 223 launches in the forward pass, 225 to 233 in the
// backward, 209 to 211 in the optimizer's, where a lock on 211 holds for 58 launches only. Each
// such distance is a candidate the finder follows, and the longest followed is its guess
// (PeriodFinder::guess(): a step is the longest thing a job repeats). Unlocked, a victim search
// plans with the guess as a lock plans with its period: a block's next use is guessed a guess
// after its first use among the last `guess` launches, the blocks those launches did not use go
// first, in lru's order, then the farthest guessed. A distance off by a few launches moves each
// guessed use by as much, which keeps the order of uses far apart; lru, on a loop over more than
// fits, evicts each block just before its next use.
// On the H200 job the second step (launches 238 to 448) fetched 10.8 GiB where lru's victims
// fetched 13.1 (MIN 9.1), the third 10.3 against 11.0 (MIN 9.3), and the job 155.7 GiB against
// 158.9 (1.09x MIN against 1.11x); on the generated training loops, cut to their first 4 steps
// and with the first zeroing the optimizer's state, at most 1.26x MIN against 1.59x, 1.07x
// against 1.20x on average (1.06x since a launch's promotions count together: Note [A launch's
// promotions]). Promotions stay lru's (every block that fits): only a lock's plan
// leaves a block on the host. The plan is made at the first victim search after the guess
// changed (it changes 40 times in the H200 job), at a lock's cost (every block on the device
// ordered once: 17 ms with 10^5 of them), and slides with each launch as a lock's does; a
// search then costs what a locked one does (2-4 us for 64 granules).
//
// Note [Learned promotes ahead]
// Locked, the plan says which blocks the next launches use, so when a window is open for the
// launch at hand the policy names the blocks with host granules that the next kAheadLaunches
// launches use, in the order they are needed, while they fit in the room nothing needed holds:
// the room under the budget that the launch at hand's promotions leave, and the blocks on the
// device the plan never uses again (Note [Promoting ahead] in eviction_policy.h says why no
// more). The walk stops at the first block that does not fit, so that no block comes in before
// one needed sooner. The horizon bounds the walk: a window is rare, but launches may touch many
// blocks each.
//
// Note [Keeping lru warm]
// lru decides from the moment a lock breaks, and its order is that of the blocks a plan never
// uses (Note [Planning with the period]), so it must know what it would had it been told of
// every launch. What it knows of launches is each block's last sequence (the highest
// seen) and the highest sequence of all, which a new block takes (Note [LRU recency] in lru.h);
// neither depends on the order it learns them in. So while locked it is told of each launch's
// sequence but not of its blocks; each block's last sequence waits in the block's entry (which
// the launch reads anyway; a block's place among those a plan never uses counts it), and the
// end of the lock tells lru each block's, once. Allocations,
// frees and moves still go to it at once: they are rare, and a new block's recency needs the
// highest sequence of the moment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "policies/eviction_policy.h"
#include "policies/lru.h"
#include "policies/period_finder.h"

namespace vramspill::policies {

class LearnedPolicy final : public EvictionPolicy {
 public:
  static constexpr std::string_view kName = "learned";
  // How many launches ahead a window brings blocks in for (Note [Learned promotes ahead]).
  static constexpr uint64_t kAheadLaunches = 32;

  explicit LearnedPolicy(const PolicyOptions& options)
      : EvictionPolicy(options), fallback_(options) {}

  // The period the policy is locked on (Note [Learning the period]); 0 when it is not.
  uint64_t period() const noexcept { return finder_.period(); }
  // Times a locked period stopped matching.
  uint64_t unlocks() const noexcept { return finder_.unlocks(); }
  // The blocks it keeps an entry for: the live ones it knows anything of, and the freed ones
  // whose uses are still in the plan. Bounded by those, however many blocks came and went.
  std::size_t known_blocks() const noexcept { return blocks_.size(); }

 private:
  std::string_view do_name() const noexcept override { return kName; }
  void do_allocated(BlockId block, uint64_t granules, bool on_device) override;
  void do_freed(BlockId block) override;
  void do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) override;
  void do_moved(BlockId block, uint64_t device_granules) override;
  std::vector<BlockId> do_choose_victims(uint64_t granules_needed,
                                         std::span<const BlockId> keep) override;
  bool do_should_promote(BlockId block) override;
  bool do_evicts_in_part() const noexcept override { return true; }
  std::vector<BlockId> do_promote_ahead(uint64_t room_taken,
                                        std::span<const BlockId> keep) override;
  std::string do_learned_state() const override;
  uint64_t do_learning_changes() const noexcept override {
    return finder_.locks() + finder_.unlocks();
  }
  // Once locked, the job is known periodic: the launches that break a lock are moments of it.
  bool do_knows_next_uses() const noexcept override { return finder_.locks() != 0; }

  static constexpr uint64_t kNever = UINT64_MAX;

  // What the policy knows of one block, in one entry, so that a launch looks each block up once.
  // Kept while any of it is set.
  struct Block {
    // Where in the order (Note [Planning with the period]) it is.
    enum class Place : uint8_t { kNone, kRing, kNeverUsed };

    BlockId id = 0;
    uint64_t device_granules = 0;
    // Planned: the launches among the last `plan_` that used it, oldest first, from
    // uses[first_use] on (the entries before are gone; Note [Learning the period]).
    std::vector<uint64_t> uses;
    uint32_t first_use = 0;
    Place place = Place::kNone;
    uint32_t slot = 0;          // its index in its ring bucket
    uint64_t next_use = 0;      // the launch it is ordered at, when placed
    uint64_t lru_sequence = 0;  // its last launch lru has not been told of; 0 when none
    LruPolicy::Recency recency;  // its key among the blocks never used, when placed there
  };

  // Orders the blocks on the device by their next use, with the last `period` launches as the
  // future: the lock's period, or a guess at it (Note [Guessing the step]).
  // All or nothing: a bad_alloc leaves no plan.
  void plan(uint64_t period);
  // Plans with `period` unless the plan is made with it already: a guess that changed since the
  // last search, or a plan that a bad_alloc undid.
  void ensure_plan(uint64_t period);
  void unplan() noexcept;
  // The launches stopped following the period: back to a guess, or lru.
  void unlock();
  // Planned, launch `now` used `blocks` and the launch a plan's period before leaves the plan:
  // their next uses move on.
  void slide(uint64_t now, uint64_t sequence);
  // The launch of `block`'s next use after the current one, by the plan; kNever when it has none.
  uint64_t next_use(const Block& block) const;
  // The blocks on the device by their planned next use, farthest first, until they cover
  // `granules_needed` (Note [Planning with the period]).
  std::vector<BlockId> planned_victims(uint64_t granules_needed, std::span<const BlockId> keep);
  // The device granules of the blocks on the device next needed after `launch` (never again
  // included), none of `excluded` (sorted), summed farthest first until they reach `enough`.
  uint64_t displaceable_after(uint64_t launch, uint64_t enough,
                              std::span<const BlockId> excluded) const;
  // Locked: whether `incoming` granules (`block`'s and those promised before it) come in without
  // displacing a block needed before `block` (Note [Planning with the period]).
  bool displaces_nothing_needed_sooner(BlockId block, uint64_t incoming) const;
  // Note [A launch's promotions]
  void forget_promise(BlockId block) noexcept;
  uint64_t promised_granules() const noexcept;
  // Puts `block` (on the device) in the order at its next use.
  void order(Block& block);
  void unorder(Block& block);
  // Whether `block`'s entry holds nothing any more, and can go.
  static bool holds_nothing(const Block& block) noexcept;
  // Calls `visit(bucket, launch)` for each non-empty ring bucket whose launch is above `after`,
  // farthest first, while it returns true; false when it stopped on false.
  template <typename Visit>
  bool visit_ring(uint64_t after, Visit visit) const;
  // `block`'s entry, made if it has none.
  Block& entry(BlockId block);

  LruPolicy fallback_;
  PeriodFinder finder_;
  std::vector<BlockId> sorted_;  // the launch at hand's blocks, distinct and sorted
  // Every block the policy knows of.
  std::unordered_map<BlockId, Block> blocks_;
  uint64_t device_granules_ = 0;  // held by all blocks together
  // The period the plan is made with: the lock's, or while unlocked the guess at it the last
  // victim search made (Note [Guessing the step]); 0 when there is no plan.
  uint64_t plan_ = 0;
  // Planned, the blocks on the device by the launch of their next use (Note [Planning with the
  // period]): ring_[launch % plan_] and a bit in full_ for each bucket that holds a block; and
  // the blocks never used again.
  std::vector<std::vector<Block*>> ring_;
  std::vector<uint64_t> full_;
  std::map<LruPolicy::Recency, BlockId> never_used_;  // lru's order, the first evicted first
  // The promotions agreed since the last launch that no move has reported yet, and the host
  // granules each brings in (Note [A launch's promotions]).
  struct Promise {
    BlockId block = 0;
    uint64_t granules = 0;
  };
  std::vector<Promise> promised_;
};

}  // namespace vramspill::policies
