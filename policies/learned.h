// learned: finds the period of the job's launches and, once the launches follow it, plans as
// Belady's MIN would with the last period as the future; lru until then, and again whenever the
// launches stop repeating.
//
// Note [Learning the period]
// Training repeats itself every step: the same kernels touch the same allocations in the same
// order (a framework's caching allocator keeps handing out the same device blocks). A launch is
// known by the set of blocks it touches (its signature: the blocks, sorted, hashed). Each
// launch's signature is compared with the one a candidate period P earlier; a candidate comes
// from the last time the same signature was seen. Once kLockAfter launches in a row have matched
// (or the whole period, if it is shorter), the policy is *locked* on P: the last P launches are
// the plan, and a block's next use is its next occurrence in the plan after the current phase.
// One launch that does not match (a new phase, an evaluation step, another batch shape) unlocks
// it: decisions are lru's (kept warm all along, Note [Keeping lru warm]) until a period locks
// again. Periods longer than kMaxPeriod launches are never found.
// Why lock after two matches and not after a whole repeated period: a training step is the
// period, and waiting for a whole one to repeat left the second step to lru, which on the
// workloads of tests/shim/tiered/policy_workloads.cpp (replayed, 6 steps) fetched 1.41x what
// MIN does, against 1.13-1.15x when locking at the second match. A wrong lock costs the launches
// until the next mismatch, which unlocks it; replays of random access and of inference with a
// growing cache fetched less with early locks, not more (README.md, "Which policy").
//
// Note [Planning with the period]
// Locked, a victim search evicts the blocks on the device whose next use is farthest away,
// never-used-again first (Belady's MIN). A block on the host that a launch touches is brought in
// when it fits in the room left, or when its next use comes sooner than that of some block on
// the device that could make room for it; otherwise it is touched in place over the link, as
// MIN-with-bypass would: bringing it in would evict data needed sooner, and a block used once a
// step costs one crossing in place against two (in, and out again) when moved. The blocks on the
// device are kept ordered by the launch of their next use, which changes only when a block is
// used (the plan repeats), and lies within the period ahead: the order is a ring of `period`
// buckets, one per launch ahead, with a bitmap of the buckets that hold a block. A use moves a
// block between buckets in O(1) (one used once a period stays in its bucket, which comes round
// again), where an ordered set of 10^5 blocks cost a rebalance and cache misses per block.
// Within a launch the higher block id goes first, as ties always went. A victim search walks from
// the farthest bucket, sorting each it reaches (a launch's blocks, so O((victims + keep) log)
// when buckets hold a launch each); a promotion decision needs no order within a bucket, as it
// only sums what could make room. Two rarer places sit outside the ring: the blocks the plan
// never uses (farthest of all), and the blocks whose next use went by without the launch using
// them (nearest of all). Only a launch that matched the period's signature with other blocks
// leaves one there, which a 64-bit hash makes all but impossible, but it must not change a
// decision either. Locking orders them all once.
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
// lru decides from the moment a lock breaks, so it must then know what it would had it been
// told of every launch. What it knows of launches is each block's last sequence (the highest
// seen) and the highest sequence of all, which a new block takes (Note [LRU recency] in lru.h);
// neither depends on the order it learns them in. So while locked it is told of each launch's
// sequence but not of its blocks; each block's last sequence waits in the block's entry (which
// the launch reads anyway), and the end of the lock tells lru each block's, once. Allocations,
// frees and moves still go to it at once: they are rare, and a new block's recency needs the
// highest sequence of the moment.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "policies/eviction_policy.h"
#include "policies/lru.h"

namespace vramspill::policies {

class LearnedPolicy final : public EvictionPolicy {
 public:
  static constexpr std::string_view kName = "learned";
  static constexpr uint64_t kMaxPeriod = uint64_t{1} << 15;
  // Launches in a row that must follow a candidate period before the policy locks on it (Note
  // [Learning the period]).
  static constexpr uint64_t kLockAfter = 2;
  // How many launches ahead a window brings blocks in for (Note [Learned promotes ahead]).
  static constexpr uint64_t kAheadLaunches = 32;

  explicit LearnedPolicy(const PolicyOptions& options);

  // The period the policy is locked on (Note [Learning the period]); 0 when it is not.
  uint64_t period() const noexcept { return locked_ ? period_ : 0; }
  // Times a locked period stopped matching.
  uint64_t unlocks() const noexcept { return unlocks_; }

 private:
  std::string_view do_name() const noexcept override { return kName; }
  void do_allocated(BlockId block, uint64_t granules, bool on_device) override;
  void do_freed(BlockId block) override;
  void do_used(uint64_t sequence, uint32_t stream, std::span<const BlockId> blocks) override;
  void do_moved(BlockId block, uint64_t device_granules) override;
  std::vector<BlockId> do_choose_victims(uint64_t granules_needed,
                                         std::span<const BlockId> keep) override;
  bool do_should_promote(BlockId block) override;
  std::vector<BlockId> do_promote_ahead(uint64_t room_taken,
                                        std::span<const BlockId> keep) override;
  std::string do_learned_state() const override;
  uint64_t do_learning_changes() const noexcept override { return locks_ + unlocks_; }

  static constexpr uint64_t kNever = UINT64_MAX;

  // What the policy knows of one block, in one entry, so that a launch looks each block up once.
  // Kept while any of it is set.
  struct Block {
    // Where in the order (Note [Planning with the period]) it is.
    enum class Place : uint8_t { kNone, kRing, kNeverUsed, kWentBy };

    BlockId id = 0;
    uint64_t device_granules = 0;
    // Its phases of use in the plan: plan_phases_[plan_first, plan_first + plan_count).
    uint64_t plan_first = 0;
    uint32_t plan_count = 0;
    Place place = Place::kNone;
    uint32_t slot = 0;          // its index in its ring bucket
    uint64_t next_use = 0;      // the launch it is ordered at, when placed
    uint64_t lru_sequence = 0;  // its last launch lru has not been told of; 0 when none
  };

  // Records the launch at position launches_ (its blocks are in launch_blocks_ already) and
  // follows or finds the period.
  void learn(uint64_t signature);
  void lock();
  // Launch `now` does not follow the period: back to lru, and to looking for a period.
  void unlock(uint64_t now);
  // Records that `signature` was last seen at `launch`.
  void see(uint64_t signature, uint64_t launch);
  // The launch of `block`'s next use after the current one, by the plan; kNever when it has none.
  uint64_t next_use(const Block& block) const;
  // The device granules of the blocks on the device next needed after `launch` (never again
  // included), none of `excluded` (sorted), summed farthest first until they reach `enough`.
  uint64_t displaceable_after(uint64_t launch, uint64_t enough,
                              std::span<const BlockId> excluded) const;
  // Puts `block` (on the device) in the order at its next use.
  void order(Block& block);
  void unorder(Block& block);
  // After launch `now` has moved on the blocks it used: those still ordered at it went by unused
  // (Note [Planning with the period]); they leave its bucket before it stands for `now + period`.
  void retire(uint64_t now);
  // Whether `block`'s entry holds nothing any more, and can go.
  static bool holds_nothing(const Block& block) noexcept;
  // Calls `visit(bucket, launch)` for each non-empty ring bucket whose launch is above `after`,
  // farthest first, while it returns true; false when it stopped on false.
  template <typename Visit>
  bool visit_ring(uint64_t after, Visit visit) const;
  // `block`'s entry, made if it has none.
  Block& entry(BlockId block);

  LruPolicy fallback_;
  // The last kMaxPeriod * 2 launches: signatures, and each one's blocks.
  std::vector<uint64_t> signatures_;
  std::vector<std::vector<BlockId>> launch_blocks_;
  uint64_t launches_ = 0;                        // launches seen
  std::unordered_map<uint64_t, uint64_t> seen_;  // signature -> the last launch that had it
  uint64_t period_ = 0;                          // the candidate, or the locked, period
  uint64_t matched_ = 0;                         // launches in a row that matched it
  bool locked_ = false;
  uint64_t locked_at_ = 0;  // the first launch of the current lock
  uint64_t locks_ = 0;
  uint64_t unlocks_ = 0;
  // Every block the policy knows of, and the plan they point into: the phases of use in the last
  // whole period, by block; the phase of launch 0.
  std::unordered_map<BlockId, Block> blocks_;
  std::vector<uint32_t> plan_phases_;
  uint64_t plan_start_ = 0;
  uint64_t device_granules_ = 0;  // held by all blocks together
  // Locked, the blocks on the device by the launch of their next use (Note [Planning with the
  // period]): ring_[launch % period_] and a bit in full_ for each bucket that holds a block; the
  // blocks never used again; (launch, block) for those whose next use went by.
  std::vector<std::vector<Block*>> ring_;
  std::vector<uint64_t> full_;
  std::set<BlockId> never_used_;
  std::set<std::pair<uint64_t, BlockId>> went_by_;
};

}  // namespace vramspill::policies
