// core::HostBudget: the limit holds under threads, and it costs nothing at load time.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/host_budget.h"

namespace vramspill::core {
namespace {

// Compiles only if a HostBudget in static storage is constant-initialised (no code at load).
constinit HostBudget static_budget;
constinit HostBudget static_limited_budget{uint64_t{1} << 30};

TEST(HostBudget, IsConstantInitialisedAndUnlimitedByDefault) {
  EXPECT_EQ(static_budget.limit(), HostBudget::kUnlimited);
  EXPECT_EQ(static_limited_budget.limit(), uint64_t{1} << 30);
  EXPECT_TRUE(static_budget.try_reserve(uint64_t{1} << 62));
  static_budget.release(uint64_t{1} << 62);
  EXPECT_EQ(static_budget.used(), 0u);
}

TEST(HostBudget, ReservesUpToTheLimitAndNoFurther) {
  HostBudget budget(100);
  EXPECT_TRUE(budget.try_reserve(60));
  EXPECT_TRUE(budget.try_reserve(40));
  EXPECT_FALSE(budget.try_reserve(1));
  EXPECT_TRUE(budget.try_reserve(0));
  EXPECT_EQ(budget.used(), 100u);
  EXPECT_EQ(budget.available(), 0u);
  EXPECT_EQ(budget.refusals(), 1u);
  budget.release(60);
  EXPECT_EQ(budget.used(), 40u);
  EXPECT_EQ(budget.available(), 60u);
  EXPECT_FALSE(budget.try_reserve(61));
  EXPECT_TRUE(budget.try_reserve(60));
  EXPECT_EQ(budget.peak(), 100u);
}

TEST(HostBudget, HugeRequestsDoNotWrapAround) {
  HostBudget budget(100);
  ASSERT_TRUE(budget.try_reserve(50));
  EXPECT_FALSE(budget.try_reserve(UINT64_MAX));
  EXPECT_FALSE(budget.try_reserve(UINT64_MAX - 40));
  EXPECT_EQ(budget.used(), 50u);
}

TEST(HostBudget, LoweringTheLimitRevokesNothingButRefusesNewReservations) {
  HostBudget budget(100);
  ASSERT_TRUE(budget.try_reserve(80));
  budget.set_limit(50);
  EXPECT_EQ(budget.used(), 80u);
  EXPECT_EQ(budget.available(), 0u);
  EXPECT_FALSE(budget.try_reserve(1));
  budget.release(40);
  EXPECT_TRUE(budget.try_reserve(10));
  EXPECT_FALSE(budget.try_reserve(1));
}

TEST(HostBudget, OverReleaseClampsAtZeroAndCountsAnInternalError) {
  HostBudget budget(100);
  ASSERT_TRUE(budget.try_reserve(10));
  budget.release(20);
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(budget.internal_errors(), 1u);
  EXPECT_TRUE(budget.try_reserve(100));
}

// Eight threads race for a limit of 100 one-byte reservations: never more than the limit held,
// and every byte is back at the end.
TEST(HostBudget, TheLimitHoldsUnderThreads) {
  HostBudget budget(100);
  std::atomic<uint64_t> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (budget.try_reserve(7)) {
          granted.fetch_add(1, std::memory_order_relaxed);
          EXPECT_LE(budget.used(), 100u);
          budget.release(7);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_LE(budget.peak(), 100u);
  EXPECT_GT(granted.load(), 0u);
  EXPECT_EQ(budget.internal_errors(), 0u);
}

}  // namespace
}  // namespace vramspill::core
