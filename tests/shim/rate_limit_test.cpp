// telemetry/rate_limit with an explicit clock: bursts, windows, suppressed counts, threads.
#include "telemetry/rate_limit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace vramspill {
namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;

class RateLimitTest : public ::testing::Test {
 protected:
  void SetUp() override { reset_rate_limits(); }
  // A time inside window `n` (windows are kRateWindow long, counted from the clock's epoch).
  static nanoseconds in_window(int n, nanoseconds offset = nanoseconds(0)) {
    return kRateWindow * n + seconds(1) + offset;
  }
};

TEST_F(RateLimitTest, BurstThenSuppressed) {
  for (uint32_t i = 1; i <= kRateBurst; ++i) {
    const RateDecision decision = should_log(RateKey::kOverBudget, in_window(100));
    EXPECT_TRUE(decision) << i;
    EXPECT_EQ(decision.last_in_window, i == kRateBurst) << i;
    EXPECT_EQ(decision.suppressed_before, 0u);
  }
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(should_log(RateKey::kOverBudget, in_window(100)));
}

TEST_F(RateLimitTest, NextWindowReportsWhatWasSuppressed) {
  for (int i = 0; i < 12; ++i) should_log(RateKey::kOverBudget, in_window(100));
  const RateDecision next = should_log(RateKey::kOverBudget, in_window(101));
  EXPECT_TRUE(next);
  EXPECT_EQ(next.suppressed_before, 12u - kRateBurst);
  // Reported once: the window's next message carries nothing.
  EXPECT_EQ(should_log(RateKey::kOverBudget, in_window(101)).suppressed_before, 0u);
}

TEST_F(RateLimitTest, QuietWindowsInBetweenKeepTheCount) {
  for (int i = 0; i < 7; ++i) should_log(RateKey::kOverBudget, in_window(100));
  const RateDecision much_later = should_log(RateKey::kOverBudget, in_window(5000));
  EXPECT_TRUE(much_later);
  EXPECT_EQ(much_later.suppressed_before, 2u);
}

TEST_F(RateLimitTest, NothingSuppressedNothingReported) {
  for (uint32_t i = 0; i < kRateBurst; ++i) should_log(RateKey::kOverBudget, in_window(7));
  EXPECT_EQ(should_log(RateKey::kOverBudget, in_window(8)).suppressed_before, 0u);
  EXPECT_EQ(take_suppressed(RateKey::kOverBudget), 0u);
}

TEST_F(RateLimitTest, KeysAreIndependent) {
  for (int i = 0; i < 10; ++i) should_log(RateKey::kOverBudget, in_window(3));
  EXPECT_TRUE(should_log(RateKey::kDriverFallback, in_window(3)));
}

TEST_F(RateLimitTest, TakeSuppressedReportsOnceAndKeepsTheWindowQuiet) {
  for (int i = 0; i < 9; ++i) should_log(RateKey::kOverBudget, in_window(4));
  EXPECT_EQ(take_suppressed(RateKey::kOverBudget), 4u);
  EXPECT_EQ(take_suppressed(RateKey::kOverBudget), 0u);
  EXPECT_FALSE(should_log(RateKey::kOverBudget, in_window(4)));  // still over the burst
  EXPECT_EQ(should_log(RateKey::kOverBudget, in_window(5)).suppressed_before, 1u);
}

TEST_F(RateLimitTest, AClockGoingBackwardsStaysInTheWindow) {
  for (uint32_t i = 0; i < kRateBurst; ++i) should_log(RateKey::kOverBudget, in_window(10));
  EXPECT_FALSE(should_log(RateKey::kOverBudget, in_window(9)));
}

TEST_F(RateLimitTest, RealClockOverload) { EXPECT_TRUE(should_log(RateKey::kDriverFallback)); }

TEST_F(RateLimitTest, ExactlyTheBurstAcrossThreads) {
  constexpr int kThreads = 8;
  constexpr int kCalls = 2000;
  std::atomic<int> admitted{0};
  std::atomic<int> last{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        const RateDecision decision = should_log(RateKey::kOverBudget, in_window(42));
        admitted += decision.log ? 1 : 0;
        last += decision.last_in_window ? 1 : 0;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(admitted.load(), static_cast<int>(kRateBurst));
  EXPECT_EQ(last.load(), 1);
  EXPECT_EQ(take_suppressed(RateKey::kOverBudget), uint64_t{kThreads * kCalls - kRateBurst});
}

TEST(RateKeys, EveryKeyHasADescription) {
  for (std::size_t i = 0; i < static_cast<std::size_t>(RateKey::kCount); ++i) {
    const std::string_view description = rate_key_description(static_cast<RateKey>(i));
    EXPECT_FALSE(description.empty());
    EXPECT_NE(description, "unknown");
  }
}

}  // namespace
}  // namespace vramspill
