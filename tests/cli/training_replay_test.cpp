// The policies on generated training loops (training_loops.h), replayed at 1.25 to 3 times their
// budget, 24 steps each: learned, which locks on the steps' period once a window of it has
// repeated and evicts the farthest-needed granules (the last victim in part), fetches at most 1.2x
// Belady's MIN on every one, and never more than lru, neither in bytes fetched nor in bytes over
// the link (the replay's link_granules(): what it reads in place counts too).
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
        shape.name().c_str(), static_cast<unsigned long long>(input.launches),
        ratio(learned.fetched_granules(), optimum), ratio(lru.fetched_granules(), optimum),
        ratio(learned.link_granules(), lru.link_granules()));
    // The goal is 1.3x; the worst is 1.17x (2 layers at 1.5x, workspace, rotating), and
    // 1.2x holds the margin, so that a regression shows. It was 1.32x (2 layers at 2x) when
    // victims moved whole and a whole period had to repeat before the lock.
    EXPECT_LE(ratio(learned.fetched_granules(), optimum), 1.2) << shape.name();
    EXPECT_LE(learned.fetched_granules(), lru.fetched_granules()) << shape.name();
    EXPECT_LE(learned.link_granules(), lru.link_granules()) << shape.name();
  }
}

}  // namespace
}  // namespace vramspill::cli
