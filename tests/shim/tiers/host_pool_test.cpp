// tiers::HostPool over fake pinned memory (real, readable mmap memory with counted calls).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "core/host_budget.h"
#include "fake_pinned_memory.h"
#include "tiers/host_pool.h"

namespace vramspill::tiers {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

HostPoolOptions small_steps(bool background) {
  HostPoolOptions options;
  options.step_bytes = 1 * kMiB;
  options.low_water_bytes = 1 * kMiB;
  options.release_idle_above = 64 * kMiB;
  options.grow_in_background = background;
  options.own_region_above = 1 * kMiB;  // every block up to a step is cut from a step
  return options;
}

// Regions of their own above a quarter of a step (the default), and no idle memory kept.
HostPoolOptions own_regions_kept_none(bool background) {
  HostPoolOptions options = small_steps(background);
  options.own_region_above = 0;
  options.release_idle_above = 0;
  return options;
}

uint64_t address(const void* p) { return reinterpret_cast<uint64_t>(p); }

void fill(void* block, uint64_t bytes, unsigned char seed) { std::memset(block, seed, bytes); }

bool holds(const void* block, uint64_t bytes, unsigned char seed) {
  const auto* p = static_cast<const unsigned char*>(block);
  for (uint64_t i = 0; i < bytes; ++i) {
    if (p[i] != seed) return false;
  }
  return true;
}

TEST(HostPool, BlocksAreAlignedLikeCuMemAllocAndDisjoint) {
  for (const uint64_t granularity : {uint64_t{256}, uint64_t{4096}, uint64_t{100}}) {
    core::HostBudget budget;
    FakePinnedMemory fake;
    HostPoolOptions options = small_steps(false);
    options.granularity = granularity;
    HostPool pool(options, fake.ops(), budget);
    std::map<uint64_t, uint64_t> live;
    for (const uint64_t bytes : {1ul, 255ul, 256ul, 257ul, 4095ul, 5000ul, 65536ul, 3ul}) {
      void* block = pool.allocate(bytes);
      ASSERT_NE(block, nullptr);
      EXPECT_EQ(address(block) % 256, 0u) << "granularity " << granularity;
      EXPECT_EQ(address(block) % pool.options().granularity, 0u);
      live.emplace(address(block), bytes);
    }
    uint64_t previous_end = 0;
    for (const auto& [start, bytes] : live) {
      EXPECT_GE(start, previous_end);
      previous_end = start + bytes;
    }
    EXPECT_EQ(pool.options().granularity, granularity == 100 ? 256u : granularity);
  }
}

// Note [RLIMIT_MEMLOCK and the host limit]: a small block under a pinning limit smaller than a
// step gets a region the limit holds, ahead of need as at need, rather than a refusal for the
// step it cannot.
TEST(HostPool, AStepIsNoLargerThanThePinningLimitLeaves) {
  for (const bool background : {false, true}) {
    core::HostBudget budget;
    FakePinnedMemory fake;
    fake.room = 256 * kKiB;  // a step is 1 MiB
    HostPool pool(small_steps(background), fake.ops_with_room(), budget);
    void* first = pool.allocate(4 * kKiB);
    ASSERT_NE(first, nullptr) << "background " << background;
    void* second = pool.allocate(100 * kKiB);
    ASSERT_NE(second, nullptr) << "background " << background;
    pool.wait_for_background_work();
    for (const std::size_t bytes : fake.pin_sizes()) EXPECT_LE(bytes, 256 * kKiB);
    EXPECT_LE(fake.outstanding_bytes(), 256 * kKiB);
    pool.free(first);
    pool.free(second);
  }
}

TEST(HostPool, FreeReturnsTheRoundedSizeAndNulloptForAnythingNotAllocated) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  void* block = pool.allocate(5000);
  ASSERT_NE(block, nullptr);
  EXPECT_TRUE(pool.owns(block));
  EXPECT_TRUE(pool.owns(static_cast<char*>(block) + 100));

  int on_the_stack = 0;
  void* from_malloc = std::malloc(64);
  EXPECT_FALSE(pool.owns(&on_the_stack));
  EXPECT_EQ(pool.free(&on_the_stack), std::nullopt);
  EXPECT_EQ(pool.free(from_malloc), std::nullopt);
  EXPECT_EQ(pool.free(nullptr), std::nullopt);
  EXPECT_EQ(pool.free(static_cast<char*>(block) + 4096), std::nullopt);  // interior pointer
  std::free(from_malloc);

  EXPECT_EQ(pool.free(block), 8192u);  // 5000 rounded to 4 KiB
  EXPECT_EQ(pool.free(block), std::nullopt);  // double free
  EXPECT_EQ(pool.stats().used_bytes, 0u);
  EXPECT_EQ(pool.stats().live_blocks, 0u);
  EXPECT_EQ(pool.allocate(0), nullptr);
}

// Eight threads allocate, fill, check and free blocks of random sizes; each block's bytes must be
// its own until it is freed, on whichever thread frees it.
TEST(HostPool, EightThreadsAllocateAndFreeWithoutSharingBytes) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPoolOptions options = small_steps(true);
  options.step_bytes = 4 * kMiB;
  options.low_water_bytes = 2 * kMiB;
  HostPool pool(options, fake.ops(), budget);
  constexpr int kThreads = 8;
  std::vector<std::vector<std::pair<void*, uint64_t>>> handed_over(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 random(static_cast<uint64_t>(t) + 1);
      std::vector<std::tuple<void*, uint64_t, unsigned char>> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.size() < 16 && random() % 4 != 0) {
          const uint64_t bytes = random() % (96 * kKiB) + 1;
          void* block = pool.allocate(bytes);
          ASSERT_NE(block, nullptr);
          const auto seed = static_cast<unsigned char>(t * 31 + i);
          fill(block, bytes, seed);
          mine.emplace_back(block, bytes, seed);
        } else if (!mine.empty()) {
          const std::size_t pick = random() % mine.size();
          const auto [block, bytes, seed] = mine[pick];
          ASSERT_TRUE(holds(block, bytes, seed)) << "thread " << t << " block overwritten";
          ASSERT_TRUE(pool.free(block).has_value());
          mine.erase(mine.begin() + static_cast<long>(pick));
        }
      }
      for (const auto& [block, bytes, seed] : mine) {
        ASSERT_TRUE(holds(block, bytes, seed));
        handed_over[static_cast<std::size_t>(t)].emplace_back(block, bytes);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // The survivors are freed by another thread than the one that allocated them.
  std::thread other([&] {
    for (const auto& blocks : handed_over) {
      for (const auto& [block, bytes] : blocks) EXPECT_GE(pool.free(block).value_or(0), bytes);
    }
  });
  other.join();
  const HostPoolStats stats = pool.stats();
  EXPECT_EQ(stats.used_bytes, 0u);
  EXPECT_EQ(stats.live_blocks, 0u);
  EXPECT_EQ(stats.allocations, stats.frees);
  EXPECT_EQ(stats.internal_errors, 0u);
  EXPECT_EQ(budget.used(), fake.outstanding_bytes());
}

TEST(HostPool, WarmUpPinsAStepInTheBackground) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(true), fake.ops(), budget);
  EXPECT_EQ(fake.pins(), 0);  // nothing happens before it is asked
  pool.warm_up();
  pool.wait_for_background_work();
  EXPECT_EQ(fake.pins(), 1);
  EXPECT_EQ(fake.pins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(pool.stats().pins_ahead, 1u);
  EXPECT_EQ(pool.stats().pinned_bytes, 1 * kMiB);
  EXPECT_EQ(budget.used(), 1 * kMiB);
}

// After warm-up, bursts of small allocations no larger than the low-water mark never wait for
// pinning: the background thread keeps a step ahead.
TEST(HostPool, SmallAllocationsAfterWarmUpNeverPinOnTheAllocatingThread) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  fake.delay = std::chrono::milliseconds(5);
  HostPool pool(small_steps(true), fake.ops(), budget);
  pool.warm_up();
  pool.wait_for_background_work();
  std::vector<void*> blocks;
  for (int burst = 0; burst < 6; ++burst) {
    for (int i = 0; i < 16; ++i) {  // 16 x 64 KiB: one step, the low-water mark
      void* block = pool.allocate(64 * kKiB);
      ASSERT_NE(block, nullptr);
      blocks.push_back(block);
    }
    pool.wait_for_background_work();  // the program computes between bursts
  }
  const HostPoolStats stats = pool.stats();
  EXPECT_EQ(fake.pins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(stats.pins_on_allocation_path, 0u);
  EXPECT_EQ(stats.waits_for_background_pin, 0u);
  EXPECT_GE(stats.pins_ahead, 6u);
  EXPECT_GE(stats.pinned_bytes - stats.used_bytes, 1 * kMiB);
  for (void* block : blocks) pool.free(block);
}

TEST(HostPool, AnEmptyPoolWaitsForTheRequestedPinInsteadOfPinningAnother) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  fake.delay = std::chrono::milliseconds(50);
  HostPool pool(small_steps(true), fake.ops(), budget);
  pool.warm_up();  // requested, not yet done
  void* block = pool.allocate(4 * kKiB);
  ASSERT_NE(block, nullptr);
  const HostPoolStats stats = pool.stats();
  EXPECT_EQ(stats.pins_on_allocation_path, 0u);
  EXPECT_EQ(stats.waits_for_background_pin, 1u);
  EXPECT_EQ(fake.pins_by(std::this_thread::get_id()), 0);
  pool.free(block);
}

TEST(HostPool, WithoutBackgroundGrowthAnEmptyPoolPinsAStepSynchronously) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  void* block = pool.allocate(4 * kKiB);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(fake.pins_by(std::this_thread::get_id()), 1);
  EXPECT_EQ(fake.pin_sizes(), std::vector<std::size_t>{1 * kMiB});
  EXPECT_EQ(pool.stats().pins_on_allocation_path, 1u);
  pool.free(block);
}

TEST(HostPool, ABlockLargerThanAStepGetsARegionOfItsOwn) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  void* small = pool.allocate(4 * kKiB);
  ASSERT_NE(small, nullptr);
  const uint64_t large_bytes = 3 * kMiB + 1;
  void* large = pool.allocate(large_bytes);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(fake.pin_sizes(), (std::vector<std::size_t>{1 * kMiB, 3 * kMiB + 4 * kKiB}));
  EXPECT_EQ(pool.stats().regions, 2u);
  fill(large, large_bytes, 0xab);
  EXPECT_TRUE(holds(large, large_bytes, 0xab));
  // The small block's step still has room: another small block does not pin.
  void* second_small = pool.allocate(4 * kKiB);
  EXPECT_EQ(fake.pins(), 2);
  EXPECT_EQ(pool.free(large), 3 * kMiB + 4 * kKiB);
  pool.free(small);
  pool.free(second_small);
}

// Six one-step regions, all freed: idle regions beyond release_idle_above (2 MiB) go back to the
// system, largest first, never below the low-water mark, and never one with a live block.
TEST(HostPool, IdleRegionsAboveTheThresholdAreUnpinned) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPoolOptions options = small_steps(false);
  options.release_idle_above = 2 * kMiB;
  HostPool pool(options, fake.ops(), budget);
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(1 * kMiB));
  void* keeper = pool.allocate(8 * kKiB);  // a seventh region, kept busy
  fill(keeper, 8 * kKiB, 0x5a);
  EXPECT_EQ(fake.outstanding_regions(), 7u);
  for (void* block : blocks) ASSERT_TRUE(pool.free(block).has_value());
  const HostPoolStats stats = pool.stats();
  EXPECT_EQ(stats.idle_bytes, 2 * kMiB);
  EXPECT_EQ(stats.unpins, 4u);
  EXPECT_EQ(fake.unpins(), 4);
  EXPECT_EQ(fake.outstanding_regions(), 3u);
  EXPECT_EQ(budget.used(), 3 * kMiB);
  EXPECT_TRUE(pool.owns(keeper));
  EXPECT_TRUE(holds(keeper, 8 * kKiB, 0x5a));
  EXPECT_EQ(fake.bad_unpins(), 0);
}

// Note [Unpinning off the stream's callback]: a free that may not call CUDA leaves the unpinning
// to the background thread.
TEST(HostPool, DeferredFreesUnpinOnTheBackgroundThread) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPoolOptions options = small_steps(false);
  options.release_idle_above = 0;
  HostPool pool(options, fake.ops(), budget);
  void* small = pool.allocate(1 * kMiB);  // one step: kept as the low-water room
  void* large = pool.allocate(4 * kMiB);  // a region of its own
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  ASSERT_TRUE(pool.free(small, HostPool::Unpinning::kLater).has_value());
  ASSERT_TRUE(pool.free(large, HostPool::Unpinning::kLater).has_value());
  pool.wait_for_background_work();  // the budget is released after the unpin returns
  EXPECT_EQ(fake.unpins(), 1);
  EXPECT_EQ(fake.unpins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(budget.used(), 1 * kMiB);
}

// Note [The pool's thread and captures] in shim/tiers/host_tier.h: while the driver may not be
// asked (a stream capture in progress), the background thread neither pins ahead nor unpins,
// and an allocation that would have waited for its pin pins for itself; once it may, it does
// both.
TEST(HostPool, TheBackgroundThreadWaitsUntilItMayCallTheDriver) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  fake.quiet = false;
  HostPoolOptions options = small_steps(true);
  options.release_idle_above = 0;
  HostPool pool(options, fake.ops_when_quiet(), budget);
  pool.warm_up();
  void* large = pool.allocate(4 * kMiB);  // a region of its own, pinned on this thread
  ASSERT_NE(large, nullptr);
  ASSERT_TRUE(pool.free(large, HostPool::Unpinning::kLater).has_value());
  // Shared blocks, with a pin ahead requested: neither waits for the thread held off.
  void* first = pool.allocate(512 * kKiB);
  void* second = pool.allocate(768 * kKiB);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(fake.pins(), 3);
  EXPECT_EQ(fake.pins_by(std::this_thread::get_id()), 3) << "no pin ahead";
  EXPECT_EQ(fake.unpins(), 0) << "no unpin";
  fake.quiet = true;
  pool.wait_for_background_work();
  EXPECT_EQ(fake.unpins(), 1);
  EXPECT_EQ(fake.unpins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(pool.stats().pins_ahead, 1u);
  ASSERT_TRUE(pool.free(first).has_value());
  ASSERT_TRUE(pool.free(second).has_value());
}

TEST(HostPool, IdleRegionsBelowTheThresholdStayPinned) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);  // keeps up to 64 MiB idle
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(1 * kMiB));
  for (void* block : blocks) pool.free(block);
  EXPECT_EQ(fake.unpins(), 0);
  EXPECT_EQ(pool.stats().idle_bytes, 6 * kMiB);
  // Idle room is reused before anything new is pinned.
  void* again = pool.allocate(1 * kMiB);
  EXPECT_EQ(fake.pins(), 6);
  pool.free(again);
}

TEST(HostPool, TheHostBudgetRefusesGrowthAndLeavesLiveBlocksIntact) {
  core::HostBudget budget(3 * kMiB);
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    void* block = pool.allocate(1 * kMiB);
    ASSERT_NE(block, nullptr);
    fill(block, 1 * kMiB, static_cast<unsigned char>(i + 1));
    blocks.push_back(block);
  }
  EXPECT_EQ(pool.allocate(1 * kMiB), nullptr);
  EXPECT_EQ(pool.allocate(4 * kKiB), nullptr);
  EXPECT_EQ(pool.allocate(8 * kMiB), nullptr);  // its own region: refused too
  const HostPoolStats stats = pool.stats();
  EXPECT_EQ(stats.failed_allocations, 3u);
  EXPECT_EQ(stats.budget_refusals, 3u);
  EXPECT_EQ(budget.used(), 3 * kMiB);
  EXPECT_EQ(fake.pins(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(holds(blocks[static_cast<std::size_t>(i)], 1 * kMiB,
                      static_cast<unsigned char>(i + 1)));
  }
  ASSERT_TRUE(pool.free(blocks[1]).has_value());
  void* reused = pool.allocate(4 * kKiB);  // room came back: no pin needed
  EXPECT_NE(reused, nullptr);
  EXPECT_EQ(fake.pins(), 3);
  pool.free(reused);
  pool.free(blocks[0]);
  pool.free(blocks[2]);
}

TEST(HostPool, NearTheLimitAStepShrinksToWhatTheBudgetAllows) {
  core::HostBudget budget(1 * kMiB + 512 * kKiB);
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  void* first = pool.allocate(1 * kMiB);
  void* second = pool.allocate(100 * kKiB);  // a full step no longer fits; 512 KiB does
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(fake.pin_sizes(), (std::vector<std::size_t>{1 * kMiB, 512 * kKiB}));
  pool.free(first);
  pool.free(second);
}

// The pool gives a block again (once pins work again after a failure).
void expect_a_block_from(HostPool& pool) {
  void* block = pool.allocate(4 * kKiB);
  ASSERT_NE(block, nullptr);
  pool.free(block);
}

TEST(HostPool, APinFailureReturnsNullptrAndGivesTheBudgetBack) {
  core::HostBudget budget(64 * kMiB);
  FakePinnedMemory fake;
  fake.fail = true;
  HostPool pool(small_steps(false), fake.ops(), budget);
  EXPECT_EQ(pool.allocate(4 * kKiB), nullptr);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(pool.stats().pin_failures, 1u);
  fake.fail = false;
  expect_a_block_from(pool);
}

// Note [Unpinning off the allocating thread]: memory pinned but unusable is given back by the
// background thread, never by the allocation that pinned it, and the allocation fails.
TEST(HostPool, AnUnusablePinIsUnpinnedOffTheAllocatingThread) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  fake.unusable = true;
  HostPool pool(small_steps(false), fake.ops(), budget);
  EXPECT_EQ(pool.allocate(4 * kKiB), nullptr);   // a step
  EXPECT_EQ(pool.allocate(3 * kMiB), nullptr);   // a region of its own
  pool.wait_for_background_work();
  EXPECT_EQ(fake.pins(), 2);
  EXPECT_EQ(fake.unpins(), 2);
  EXPECT_EQ(fake.unpins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(fake.outstanding_regions(), 0u);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(pool.stats().pin_failures, 2u);
  fake.unusable = false;
  expect_a_block_from(pool);
}

// An unusable pin ahead of need is given back by the background thread that made it.
TEST(HostPool, AnUnusablePinAheadIsUnpinnedByTheBackgroundThread) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  fake.unusable = true;
  HostPool pool(small_steps(true), fake.ops(), budget);
  pool.warm_up();
  pool.wait_for_background_work();
  EXPECT_EQ(fake.pins(), 1);
  EXPECT_EQ(fake.unpins(), 1);
  EXPECT_EQ(fake.pins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(fake.unpins_by(std::this_thread::get_id()), 0);
  EXPECT_EQ(budget.used(), 0u);
}

// Without the background thread (stopped at exit, or never started), an unusable pin waits for
// the next free, which gives it back on the freeing thread instead of holding its budget.
TEST(HostPool, WithoutTheBackgroundThreadAnUnusablePinGoesBackAtTheNextFree) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  pool.stop_background_pinning();
  fake.unusable = true;
  EXPECT_EQ(pool.allocate(4 * kKiB), nullptr);
  EXPECT_EQ(fake.outstanding_regions(), 1u);  // pinned, waiting to be given back
  fake.unusable = false;
  void* block = pool.allocate(4 * kKiB);
  ASSERT_NE(block, nullptr);
  ASSERT_TRUE(pool.free(block).has_value());
  EXPECT_EQ(fake.unpins(), 1);
  EXPECT_EQ(fake.outstanding_regions(), 1u);  // the step the block came from, kept
  EXPECT_EQ(budget.used(), fake.outstanding_bytes());
}

// Note [Near the host limit]: when the budget refuses a new region, the idle memory the pool
// keeps serves every block it can hold.
TEST(HostPool, NearTheHostLimitKeptIdleMemoryServesWhatItCanHold) {
  core::HostBudget budget(3 * kMiB);
  FakePinnedMemory fake;
  HostPoolOptions options = small_steps(false);  // keeps up to 64 MiB idle
  options.own_region_above = 0;
  HostPool pool(options, fake.ops(), budget);
  void* large = pool.allocate(3 * kMiB);
  ASSERT_NE(large, nullptr);
  ASSERT_TRUE(pool.free(large).has_value());  // idle, kept
  void* looser = pool.allocate(2 * kMiB);  // more than an eighth smaller, but no region fits
  EXPECT_EQ(looser, large);
  ASSERT_TRUE(pool.free(looser).has_value());
  void* small = pool.allocate(4 * kKiB);  // no step fits: the idle region becomes one
  ASSERT_NE(small, nullptr);
  EXPECT_GE(address(small), address(large));
  EXPECT_LT(address(small), address(large) + 3 * kMiB);
  void* large_again = pool.allocate(2 * kMiB);  // from that step's room
  ASSERT_NE(large_again, nullptr);
  fill(large_again, 2 * kMiB, 0x11);
  EXPECT_EQ(fake.pins(), 1);
  EXPECT_EQ(pool.stats().budget_refusals, 3u);
  for (void* block : {small, large_again}) pool.free(block);
  EXPECT_EQ(budget.used(), fake.outstanding_bytes());
}

TEST(HostPool, DestructionUnpinsEverythingAndReleasesTheBudget) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  {
    HostPool pool(small_steps(true), fake.ops(), budget);
    pool.allocate(4 * kKiB);
    pool.allocate(5 * kMiB);
    pool.warm_up();
  }
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(fake.outstanding_regions(), 0u);
  EXPECT_EQ(fake.bad_unpins(), 0);
}

// A device reset frees the pinned regions under the pool: they leave the books with their live
// blocks, their bytes go back to the host budget without an unpin (there is nothing left to
// unpin), those that held blocks are fenced off, and the pool pins afresh for the next block.
TEST(HostPool, RegionsLostInAResetLeaveTheBooksWithTheirBlocks) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(small_steps(false), fake.ops(), budget);
  void* shared = pool.allocate(4 * kKiB);
  void* own = pool.allocate(5 * kMiB);
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(own, nullptr);
  pool.free(shared);
  void* live = pool.allocate(8 * kKiB);
  ASSERT_NE(live, nullptr);
  ASSERT_GT(budget.used(), 0u);

  fake.lose_everything();
  EXPECT_EQ(pool.forget_lost_regions(), 2u) << "the small block and the large one were live";
  EXPECT_EQ(fake.forgotten(), 2);
  EXPECT_EQ(fake.fenced(), 2u) << "both regions held a block: their addresses are kept";
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(pool.stats().pinned_bytes, 0u);
  EXPECT_FALSE(pool.owns(live));
  EXPECT_EQ(pool.free(own), 5 * kMiB) << "the program may still free a block it lost";
  EXPECT_EQ(pool.free(own), std::nullopt) << "once";
  EXPECT_EQ(pool.forget_lost_regions(), 0u) << "nothing is lost twice";

  void* fresh = pool.allocate(4 * kKiB);
  ASSERT_NE(fresh, nullptr);
  fill(fresh, 4 * kKiB, 0x5a);
  EXPECT_TRUE(holds(fresh, 4 * kKiB, 0x5a));
  EXPECT_EQ(pool.free(fresh), 4 * kKiB);
  EXPECT_EQ(fake.bad_unpins(), 0);
}

// Note [Regions of their own for large blocks]: a block above a quarter of a step is pinned as a
// region of its own, which no smaller block shares, and which a later block it exceeds by at most
// an eighth takes as it is once it is idle.
TEST(HostPool, ABlockAboveAQuarterStepGetsARegionNoOtherBlockShares) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPoolOptions options = small_steps(false);
  options.own_region_above = 0;  // the default: a quarter of the 1 MiB step
  HostPool pool(options, fake.ops(), budget);
  EXPECT_EQ(pool.options().own_region_above, 256 * kKiB);
  void* large = pool.allocate(300 * kKiB);
  ASSERT_NE(large, nullptr);
  fill(large, 300 * kKiB, 0x3c);
  void* quarter = pool.allocate(256 * kKiB);  // not above a quarter: cut from a step
  ASSERT_NE(quarter, nullptr);
  EXPECT_EQ(fake.pin_sizes(), (std::vector<std::size_t>{300 * kKiB, 1 * kMiB}));

  const auto inside_large = [&](const void* block) {
    return address(block) >= address(large) && address(block) < address(large) + 300 * kKiB;
  };
  std::vector<void*> small;
  for (int i = 0; i < 3; ++i) {  // fills the step: the idle large region is not room for them
    small.push_back(pool.allocate(256 * kKiB));
    ASSERT_NE(small.back(), nullptr);
  }
  ASSERT_EQ(pool.free(large), 300 * kKiB);
  void* more = pool.allocate(8 * kKiB);
  ASSERT_NE(more, nullptr);
  EXPECT_FALSE(inside_large(more));
  EXPECT_EQ(fake.pins(), 3);  // a second step for `more`

  void* close = pool.allocate(270 * kKiB);  // 30 KiB below 300: within an eighth, reused
  EXPECT_EQ(close, large);
  EXPECT_EQ(fake.pins(), 3);
  EXPECT_EQ(pool.stats().own_regions_reused, 1u);
  ASSERT_EQ(pool.free(close), 272 * kKiB);  // its own size, rounded to the granularity
  void* far = pool.allocate(260 * kKiB);  // 40 KiB below 300: more than an eighth, pinned anew
  ASSERT_NE(far, nullptr);
  EXPECT_FALSE(inside_large(far));
  EXPECT_EQ(fake.pins(), 4);
  fill(far, 260 * kKiB, 0x7e);
  EXPECT_TRUE(holds(far, 260 * kKiB, 0x7e));
  for (void* block : small) pool.free(block);
  for (void* block : {quarter, more, far}) pool.free(block);
  EXPECT_EQ(pool.stats().used_bytes, 0u);
  EXPECT_EQ(budget.used(), fake.outstanding_bytes());
}

// A freed region of its own is idle like any region: beyond release_idle_above it is unpinned by
// the free, and its bytes go back to the host budget.
TEST(HostPool, AFreedRegionOfItsOwnBeyondTheKeepIsUnpinned) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(own_regions_kept_none(false), fake.ops(), budget);
  void* large = pool.allocate(3 * kMiB);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(budget.used(), 3 * kMiB);
  ASSERT_TRUE(pool.free(large).has_value());
  EXPECT_EQ(fake.unpins(), 1);
  EXPECT_EQ(fake.unpins_by(std::this_thread::get_id()), 1);
  EXPECT_EQ(pool.stats().regions, 0u);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_FALSE(pool.owns(large));
}

// Note [Unpinning off the allocating thread]: while the background thread is held in an unpin
// (as cuMemFreeHost waits for a device whose stream is held), an allocation that finds no room
// pins a step on its own thread instead of waiting for the step it asked that thread for.
TEST(HostPool, AnAllocationNeverWaitsForTheBackgroundThreadsUnpin) {
  core::HostBudget budget;
  FakePinnedMemory fake;
  HostPool pool(own_regions_kept_none(true), fake.ops(), budget);
  void* large = pool.allocate(2 * kMiB);  // a region of its own
  ASSERT_NE(large, nullptr);
  pool.warm_up();  // and a step pinned ahead
  pool.wait_for_background_work();
  struct Released {  // before the pool unpins its regions, whatever fails
    FakePinnedMemory& fake;
    ~Released() { fake.release_unpins(); }
  } released{fake};
  fake.hold_unpins();
  // Freed in stream order: the background thread unpins it (the step pinned ahead stays, as the
  // low-water room).
  ASSERT_TRUE(pool.free(large, HostPool::Unpinning::kLater).has_value());
  ASSERT_TRUE(fake.an_unpin_is_held_within(std::chrono::seconds(10)));

  // Four quarter-step blocks use up the step and ask for the next, which the background thread
  // cannot pin before its unpin returns; the fifth must not wait for it.
  auto allocations = std::async(std::launch::async, [&pool] {
    std::vector<void*> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(256 * kKiB));
    return std::make_pair(blocks, std::this_thread::get_id());
  });
  const bool returned = allocations.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  fake.release_unpins();
  ASSERT_TRUE(returned) << "an allocation waited for the background thread's unpin";
  const auto [blocks, allocating_thread] = allocations.get();
  for (void* block : blocks) EXPECT_NE(block, nullptr);
  pool.wait_for_background_work();
  EXPECT_EQ(fake.pins_by(allocating_thread), 1);
  EXPECT_EQ(fake.unpins_by(allocating_thread), 0);
  EXPECT_EQ(fake.unpins_by(std::this_thread::get_id()), 0);
  for (void* block : blocks) pool.free(block);
  pool.wait_for_background_work();
  EXPECT_EQ(budget.used(), fake.outstanding_bytes());
}

}  // namespace
}  // namespace vramspill::tiers
