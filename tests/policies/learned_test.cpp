// learned (policies/learned.h): it locks on the period of a repeating loop (Note [Learning the
// period]) and then misses close to Belady's MIN where lru misses every use, and before the lock
// evicts by its guess at the step (Note [Guessing the step]); a stray launch does not unlock it, a
// new loop does; with no repeat at all it is lru, and on launches at random it misses no more
// than lru; locked, it leaves on the host a block whose bringing in would displace data needed
// sooner, counting the launch's other promotions with it (Note [A launch's promotions]), evicts in
// MIN's order, the last victim in part where the caller can (Note [Planning with the period]),
// and brings in ahead only into room nothing needed takes (Note [Learned promotes ahead]); a
// freed block is forgotten once its uses leave the plan.
#include "policies/learned.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "policies/belady.h"
#include "policies/lru.h"
#include "unit_simulation.h"

namespace vramspill::policies {
namespace {

using Blocks = std::vector<BlockId>;

constexpr PolicyOptions options(uint64_t capacity) { return {capacity, InvariantMode::kAbort}; }

// `rounds` turns of a loop over `blocks` blocks, one launch each.
Launches loop(uint64_t blocks, int rounds) {
  Launches launches;
  for (int round = 0; round < rounds; ++round) {
    for (BlockId block = 0; block < blocks; ++block) launches.push_back({block});
  }
  return launches;
}

// Blocks 0, 1, ... of one granule each, on the device where `on_device` says.
void allocate_one_granule_each(EvictionPolicy& policy, std::initializer_list<bool> on_device) {
  BlockId block = 0;
  for (const bool placed : on_device) policy.allocated(block++, 1, placed);
}

// `rounds` turns of `period`, told to `policy` as launches.
void follow(EvictionPolicy& policy, const Launches& period, int rounds) {
  uint64_t sequence = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const Blocks& launch : period) policy.used(++sequence, 0, launch);
  }
}

TEST(LearnedTest, LocksOnALoopAndMissesCloseToTheOptimumWhereLruMissesEveryUse) {
  constexpr uint64_t kBlocks = 10;
  constexpr uint64_t kCapacity = 6;
  const Launches launches = loop(kBlocks, 30);
  LearnedPolicy learned(options(kCapacity));
  LruPolicy lru(options(kCapacity));
  const uint64_t learned_misses = simulate_unit_misses(learned, kBlocks, kCapacity, launches);
  const uint64_t lru_misses = simulate_unit_misses(lru, kBlocks, kCapacity, launches);
  const uint64_t optimum = belady_misses(flatten(launches), kCapacity);
  EXPECT_EQ(learned.period(), kBlocks);
  EXPECT_EQ(lru_misses, launches.size());
  // The period repeats from launch 10 and locks once 16 launches (Note [Finding the period]) have
  // matched; before that the guess at the step evicts as MIN would but for the first victims
  // (Note [Guessing the step]); from then on MIN's misses, four a turn. At lru's cost before the
  // lock, it missed 150 times against MIN's 138.
  EXPECT_LE(learned_misses, optimum + 2);
  EXPECT_LE(learned_misses, lru_misses / 2);
}

TEST(LearnedTest, BeforeItLocksItEvictsByItsGuessAtTheStep) {
  // Two turns and a half of the loop above: the loop's length is a candidate from launch 10 on,
  // and the lock comes only at launch 26 (16 launches matched).
  constexpr uint64_t kBlocks = 10;
  constexpr uint64_t kCapacity = 6;
  Launches launches = loop(kBlocks, 3);
  launches.resize(26);
  LearnedPolicy learned(options(kCapacity));
  LruPolicy lru(options(kCapacity));
  const uint64_t learned_misses = simulate_unit_misses(learned, kBlocks, kCapacity, launches);
  EXPECT_EQ(learned.period(), 0u);
  EXPECT_EQ(simulate_unit_misses(lru, kBlocks, kCapacity, launches), launches.size());
  // MIN misses 16 times; lru's order, 26.
  EXPECT_LE(learned_misses, belady_misses(flatten(launches), kCapacity) + 2);
}

TEST(LearnedTest, ASmallStrayBlockKeepsTheLockAndANewLoopEndsIt) {
  // Six blocks of 4 granules in a loop, and two of 1 granule.
  LearnedPolicy learned(options(16));
  for (BlockId block = 0; block < 8; ++block) learned.allocated(block, block < 6 ? 4 : 1, false);
  uint64_t sequence = 0;
  const auto run = [&](const Launches& launches) {
    for (const Blocks& launch : launches) learned.used(++sequence, 0, launch);
  };
  EXPECT_EQ(learned.learned_state(),
            "no period found yet: evicting by a guess at the step where there is one, else as lru");
  run(loop(6, 2));  // the period has repeated, but not yet over a whole window of 16 launches
  EXPECT_EQ(learned.period(), 0u);
  run(loop(6, 2));
  EXPECT_EQ(learned.period(), 6u);
  EXPECT_EQ(learned.learning_changes(), 1u);
  EXPECT_EQ(learned.learned_state(),
            "locked on a period of 6 launches: evicting what is needed again furthest ahead");
  // A launch that also touches a small block (a scratch block the allocator rotated): one
  // granule of 64 mismatches now, and again a period later.
  run({{0, 7}, {1}, {2}, {3}, {4}, {5}});
  run(loop(6, 1));
  EXPECT_EQ(learned.period(), 6u);
  EXPECT_EQ(learned.unlocks(), 0u);
  // Another loop: within a few launches its mismatches pass 1/8 of the window's granules.
  run({{7}, {6}, {7}, {6}});
  EXPECT_EQ(learned.period(), 0u);
  EXPECT_EQ(learned.unlocks(), 1u);
  EXPECT_EQ(learned.learning_changes(), 2u);
  EXPECT_EQ(
      learned.learned_state(),
      "the launches stopped repeating the period (1 times so far): evicting by a guess at the "
      "step where there is one, else as lru, until a period repeats again");
}

TEST(LearnedTest, WithoutARepeatItDecidesAsLru) {
  // Each launch touches a block drawn at random and one of its own: no launch's blocks ever come
  // back, so there is neither a period nor a guess, and every decision is lru's.
  constexpr uint64_t kShared = 40;
  constexpr uint64_t kLaunches = 2000;
  constexpr uint64_t kCapacity = 12;
  Launches launches;
  uint64_t state = 0x2545f4914f6cdd1dULL;
  for (uint64_t i = 0; i < kLaunches; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    launches.push_back({(state >> 33) % kShared, kShared + i});
  }
  LearnedPolicy learned(options(kCapacity));
  LruPolicy lru(options(kCapacity));
  EXPECT_EQ(simulate_unit_misses(learned, kShared + kLaunches, kCapacity, launches),
            simulate_unit_misses(lru, kShared + kLaunches, kCapacity, launches));
  EXPECT_EQ(learned.learning_changes(), 0u);
}

TEST(LearnedTest, OnLaunchesAtRandomItMissesNoMoreThanLru) {
  // Launches drawn at random never repeat over a whole window, so it never locks; their blocks
  // come back at chance distances, which it guesses by (Note [Guessing the step]): 2672 misses
  // against lru's 2722.
  constexpr uint64_t kBlocks = 40;
  constexpr uint64_t kCapacity = 12;
  Launches launches;
  uint64_t state = 0x2545f4914f6cdd1dULL;
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    launches.push_back({state >> 33 & 31, (state >> 45) % kBlocks});
  }
  LearnedPolicy learned(options(kCapacity));
  LruPolicy lru(options(kCapacity));
  EXPECT_LE(simulate_unit_misses(learned, kBlocks, kCapacity, launches),
            simulate_unit_misses(lru, kBlocks, kCapacity, launches));
  EXPECT_EQ(learned.learning_changes(), 0u);
}

TEST(LearnedTest, LeavesOnTheHostABlockThatWouldDisplaceDataNeededSooner) {
  // A period of five launches on two granules: 0 and 1 are used twice, 2 once.
  const Launches period = {{0}, {1}, {0}, {1}, {2}};
  LearnedPolicy learned(options(2));
  allocate_one_granule_each(learned, {true, true, false});
  follow(learned, period, 6);
  ASSERT_EQ(learned.period(), 5u);
  // At launch {2}: 0 is needed next, then 1; 2 not for five launches. It stays on the host.
  EXPECT_FALSE(learned.should_promote(2));
  // With room on the device, it comes in.
  learned.moved(1, 0);
  EXPECT_TRUE(learned.should_promote(2));
  // And a victim search gives up what is needed last: 1 (two launches away) before 0 (one).
  learned.moved(1, 1);
  EXPECT_EQ(learned.choose_victims(1, Blocks{2}).blocks, Blocks{1});
}

// A period of 20 launches on a budget of `capacity` granules: the first touches 0 and 1 (six
// granules each, on the host), the other 19 touch 2 (four, on the device). Told until locked.
Launches lock_on_two_large_blocks_and_a_small_one(LearnedPolicy& learned) {
  Launches period(20, Blocks{2});
  period[0] = {0, 1};
  learned.allocated(0, 6, false);
  learned.allocated(1, 6, false);
  learned.allocated(2, 4, true);
  follow(learned, period, 4);
  EXPECT_EQ(learned.period(), 20u);
  return period;
}

// Note [A launch's promotions]
TEST(LearnedTest, ALaunchsPromotionsTogetherDisplaceNothingNeededSooner) {
  LearnedPolicy learned(options(12));
  const Launches period = lock_on_two_large_blocks_and_a_small_one(learned);
  // The launch of 0 and 1: each fits alone in the 8 granules of room, but together they would
  // displace 2, needed at the next launch. Only the first comes in.
  learned.used(81, 0, period[0]);
  EXPECT_TRUE(learned.should_promote(0));
  EXPECT_FALSE(learned.should_promote(1));
  EXPECT_TRUE(learned.should_promote(0));  // asked again, its own yes takes no room from it
  // The promotions left out of the launch take no room from the next one.
  learned.used(82, 0, period[1]);
  EXPECT_TRUE(learned.should_promote(1));
}

TEST(LearnedTest, APromotionTheMoverReportedTakesRoomOnceInTheBooks) {
  // With 16 granules of room, the prefetch mover brings 0 in before it asks of 1: 1 still fits.
  LearnedPolicy learned(options(20));
  const Launches period = lock_on_two_large_blocks_and_a_small_one(learned);
  learned.used(81, 0, period[0]);
  EXPECT_TRUE(learned.should_promote(0));
  learned.moved(0, 6);
  EXPECT_TRUE(learned.should_promote(1));
}

TEST(LearnedTest, ForgetsAFreedBlockOnceItsUsesLeaveThePlan) {
  // 20 blocks of two granules, in a step of 40 launches whose last also touches a scratch block
  // allocated for the step and freed after it, at a new id each step.
  LearnedPolicy learned(options(64));
  for (BlockId block = 0; block < 20; ++block) learned.allocated(block, 2, true);
  uint64_t sequence = 0;
  for (BlockId scratch = 100; scratch < 400; ++scratch) {
    learned.allocated(scratch, 1, true);
    for (BlockId launch = 0; launch < 40; ++launch) {
      learned.used(++sequence, 0, launch < 39 ? Blocks{launch % 20} : Blocks{19, scratch});
    }
    learned.freed(scratch);
  }
  ASSERT_NE(learned.period(), 0u);
  // The 20 blocks, and the last scratch block, whose use is still in the plan.
  EXPECT_EQ(learned.known_blocks(), 21u);
}

// Note [Evicting part of a block] and Note [Planning with the period]
TEST(LearnedTest, ACallerThatEvictsInPartGetsMinsOrderAndOneThatMovesWholeBlocksTheLargeOneAlone) {
  // A loop over block 0 (four granules) and 1, 2, 3 (one each), all on the device.
  const Launches period = {{0}, {1}, {2}, {3}};
  LearnedPolicy learned(options(7));
  learned.allocated(0, 4, true);
  for (BlockId block = 1; block <= 3; ++block) learned.allocated(block, 1, true);
  follow(learned, period, 6);
  ASSERT_EQ(learned.period(), 4u);
  // Needed next: 0, 1, 2, then 3. Four granules: MIN gives up 3, 2, 1 and one granule of 0.
  const Victims in_part = learned.choose_victims(4, Blocks{}, /*in_part=*/true);
  EXPECT_EQ(in_part.blocks, (Blocks{3, 2, 1, 0}));
  EXPECT_TRUE(in_part.partial_last);
  // Moved whole, 0 covers the need alone, and the small ones would only come back.
  const Victims whole = learned.choose_victims(4, Blocks{});
  EXPECT_EQ(whole.blocks, Blocks{0});
  EXPECT_FALSE(whole.partial_last);
  // lru never asks to evict in part.
  LruPolicy lru(options(7));
  lru.allocated(0, 4, true);
  EXPECT_FALSE(lru.choose_victims(1, Blocks{}, /*in_part=*/true).partial_last);
}

// Note [Learned promotes ahead]
TEST(LearnedTest, NamesAheadOnlyWhatFitsInFreeRoomOrRoomThePlanNeverUses) {
  // A period of four launches; at its end {2} (kept) and 1 are on the device, 3 and 0 on the
  // host, and next come {3}, {0}, {1}, {2}. Block 4 is on the device and never used.
  const Launches period = {{3}, {0}, {1}, {2}};
  LearnedPolicy learned(options(3));
  EXPECT_TRUE(learned.promote_ahead(0, {}).empty());  // nothing known yet
  allocate_one_granule_each(learned, {false, true, true, false, true});
  follow(learned, period, 6);
  ASSERT_EQ(learned.period(), 4u);
  // 3, needed next, takes 4's room; 0 would have to displace 1, needed after it but needed all
  // the same: it waits for its own launch.
  EXPECT_EQ(learned.promote_ahead(0, Blocks{2}), Blocks{3});
  EXPECT_EQ(learned.stats().promotions_ahead, 1u);
  // When the launch's own promotions take that room, nothing is named.
  EXPECT_TRUE(learned.promote_ahead(1, Blocks{2}).empty());
  // With room for more, they come in the order they are needed, up to the room.
  learned.moved(1, 0);
  learned.moved(2, 0);
  EXPECT_EQ(learned.promote_ahead(0, {}), (Blocks{3, 0, 1}));
}

// Bringing blocks in ahead by displacing data needed later (but needed) fetched 1.34x as much
// here: the rule must never fetch more than promoting on demand.
TEST(LearnedTest, PromotingAheadNeverFetchesMoreThanPromotingOnDemand) {
  constexpr uint64_t kBlocks = 12;
  constexpr uint64_t kCapacity = 8;
  const Launches launches = loop(kBlocks, 30);
  LearnedPolicy on_demand(options(kCapacity));
  LearnedPolicy ahead(options(kCapacity));
  const UnitRun without = simulate_units(on_demand, kBlocks, kCapacity, launches);
  const UnitRun with = simulate_units(ahead, kBlocks, kCapacity, launches, /*ahead=*/true);
  EXPECT_LE(with.fetched, without.fetched);
  EXPECT_LE(with.stops, without.stops);
}

TEST(LearnedTest, PoliciesThatDoNotKnowTheFutureNameNothingAhead) {
  LruPolicy lru(options(2));
  const Launches launches = loop(4, 5);
  const UnitRun run = simulate_units(lru, 4, 2, launches, /*ahead=*/true);
  EXPECT_EQ(run.fetched, run.misses);
  EXPECT_EQ(lru.stats().promotions_ahead, 0u);
}

}  // namespace
}  // namespace vramspill::policies
