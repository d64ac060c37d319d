// The policies on generated training loops (training_loops.h), replayed at 1.25 to 3 times their
// budget, 24 steps each: learned, which locks on the steps' period once a window of it has
// repeated and evicts the farthest-needed granules (the last victim in part), fetches at most
// 1.15x Belady's MIN on every one, and never more than lru, neither in bytes fetched nor in bytes
// over the link (the replay's link_granules(): what it reads in place counts too). Cut to their
// first 4 steps, with a first step longer than the others, it still fetches at most 1.3x MIN:
// before the lock it evicts by its guess at the step (Note [Guessing the step] in
// policies/learned.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "trace_replay.h"
#include "training_loops.h"

namespace vramspill::cli {
namespace {

using testing::TrainingLoop;

double ratio(uint64_t value, uint64_t optimum) {
  return static_cast<double>(value) / static_cast<double>(optimum);
}

TEST(TrainingLoops, LearnedFetchesAtMostAFifthMoreThanMinAndNeverMoreThanLru) {
  for (const TrainingLoop& shape : testing::training_corpus()) {
    const ReplayInput input = testing::training_loop(shape);
    const uint64_t optimum = optimal_fetched_granules(input);
    const ReplayResult learned = replay(input, "learned");
    const ReplayResult lru = replay(input, "lru");
    // The figures, for the README's table (`--gtest_filter=TrainingLoops.*`).
    std::printf(
        "%-62s %5llu launches: fetched vs MIN learned %.2fx lru %.2fx; link learned "
        "%.2fx of lru's\n",
        shape.name().c_str(), static_cast<unsigned long long>(input.submissions),
        ratio(learned.fetched_granules(), optimum), ratio(lru.fetched_granules(), optimum),
        ratio(learned.link_granules(), lru.link_granules()));
    // The goal is 1.3x; the worst is 1.13x (12 layers at 2x, foreach, workspace), and
    // 1.15x holds it, so that a regression shows. It was 1.17x (12 layers at 1.25x, foreach,
    // zeroed) when lru chose the victims before the lock, and 1.32x (2 layers at 2x) when
    // victims moved whole and a whole period had to repeat before the lock.
    EXPECT_LE(ratio(learned.fetched_granules(), optimum), 1.15) << shape.name();
    EXPECT_LE(learned.fetched_granules(), lru.fetched_granules()) << shape.name();
    EXPECT_LE(learned.link_granules(), lru.link_granules()) << shape.name();
  }
}

TEST(TrainingLoops, BeforeTheLockLearnedFetchesAtMostAThirdMoreThanMin) {
  // The cold steps weigh most in a short run: the first, which allocates and zeroes the optimizer's
  // state, and the second, which repeats it at no one distance, so nothing can lock before the
  // third (as in the PyTorch job recorded on an H200).
  double sum = 0;
  std::size_t loops = 0;
  for (TrainingLoop shape : testing::training_corpus()) {
    shape.steps = 4;
    shape.zeroed = true;
    const ReplayInput input = testing::training_loop(shape);
    const uint64_t optimum = optimal_fetched_granules(input);
    const ReplayResult learned = replay(input, "learned");
    const double fetched = ratio(learned.fetched_granules(), optimum);
    // Evicting as lru before the lock, the worst was 1.59x (2 layers at 1.5x, workspace,
    // rotating) and the mean 1.20x; guessing the step, 1.26x and 1.07x, and 1.06x on average
    // since a launch's promotions count together (Note [A launch's promotions] in
    // policies/learned.h).
    EXPECT_LE(fetched, 1.3) << shape.name();
    EXPECT_LE(learned.fetched_granules(), replay(input, "lru").fetched_granules()) << shape.name();
    sum += fetched;
    ++loops;
  }
  EXPECT_LE(sum / static_cast<double>(loops), 1.1);
}

}  // namespace
}  // namespace vramspill::cli
