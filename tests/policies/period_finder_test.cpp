// Finding the period from the blocks the launches touch (policies/period_finder.h, Note [Finding
// the period]): a repeat shorter than a window inside a step never locks, a whole step does once a
// window of it has repeated, and is the guess as soon as it comes back, and the whole step takes
// over from half a step that each optimizer phase breaks.
#include "policies/period_finder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace vramspill::policies {
namespace {

using Launches = std::vector<std::vector<BlockId>>;

// Every block weighs one granule.
uint64_t one_granule(BlockId) { return 1; }

// Observes `launches`; the period after each.
std::vector<uint64_t> observe(PeriodFinder& finder, const Launches& launches) {
  std::vector<uint64_t> periods;
  for (const std::vector<BlockId>& launch : launches) {
    finder.observe(launch, one_granule);
    periods.push_back(finder.period());
  }
  return periods;
}

// A step of 32 launches: an inner loop that alternates two launches six times, then twenty
// launches over blocks of their own.
Launches step_with_an_inner_loop() {
  Launches step;
  for (int i = 0; i < 6; ++i) {
    step.push_back({100, 101});
    step.push_back({102});
  }
  for (BlockId block = 0; block < 20; ++block) step.push_back({block});
  return step;
}

TEST(PeriodFinderTest, ARepeatShorterThanAWindowNeverLocksAndTheStepDoesOnceAWindowOfItRepeated) {
  PeriodFinder finder;
  const Launches step = step_with_an_inner_loop();
  const std::vector<uint64_t> first = observe(finder, step);
  // Twelve launches at a period of 2, ten of them compared: fewer than a window (16), where two
  // matching launches used to lock.
  for (const uint64_t period : first) EXPECT_EQ(period, 0u);
  const std::vector<uint64_t> second = observe(finder, step);
  // The step's period is proposed when its first launch of a block of its own comes back (the
  // 13th; the inner loop's launches last came 22 launches before), and locked on once the 16
  // launches after it have matched the step before: at the 29th, not at the end of the step.
  const std::size_t proposed = 12;
  const std::size_t locked = proposed + PeriodFinder::kMinWindow;
  for (std::size_t i = 0; i < locked; ++i) EXPECT_EQ(second[i], 0u) << "launch " << i;
  for (std::size_t i = locked; i < step.size(); ++i) EXPECT_EQ(second[i], 32u) << "launch " << i;
  observe(finder, step);
  EXPECT_EQ(finder.period(), 32u);
  EXPECT_EQ(finder.locks(), 1u);
}

TEST(PeriodFinderTest, TheGuessIsTheLongestCandidateBeforeAnyQualifies) {
  PeriodFinder finder;
  EXPECT_EQ(finder.guess(), 0u);
  const Launches step = step_with_an_inner_loop();
  observe(finder, Launches(step.begin(), step.begin() + 4));
  EXPECT_EQ(finder.guess(), 2u);  // the inner loop's
  observe(finder, Launches(step.begin() + 4, step.end()));
  // The step comes back at the second's 13th launch (as above), 16 launches before its lock.
  observe(finder, Launches(step.begin(), step.begin() + 13));
  EXPECT_EQ(finder.period(), 0u);
  EXPECT_EQ(finder.guess(), 32u);
}

TEST(PeriodFinderTest, TheWholeStepTakesOverFromHalfAStep) {
  // Two micro-batches of 20 launches, then an optimizer phase of 4 heavier launches.
  Launches step;
  for (int micro = 0; micro < 2; ++micro) {
    for (BlockId block = 0; block < 20; ++block) step.push_back({block});
  }
  for (BlockId block = 50; block < 54; ++block) step.push_back({block, block + 10, block + 20});
  PeriodFinder finder;
  for (int i = 0; i < 3; ++i) observe(finder, step);
  const std::vector<uint64_t> periods = observe(finder, step);
  EXPECT_EQ(periods.back(), 44u);
  EXPECT_EQ(finder.period(), 44u);
  // Each lock on 20 ended at an optimizer phase; the lock on 44 holds.
  for (int i = 0; i < 3; ++i) observe(finder, step);
  EXPECT_EQ(finder.period(), 44u);
}

}  // namespace
}  // namespace vramspill::policies
