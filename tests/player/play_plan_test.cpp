// The workload player's plan of a trace (tools/player/play_plan.h) and its steps
// (tools/player/steps.h), driven from trace text, without a driver.
#include "play_plan.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "steps.h"

namespace vramspill::player {
namespace {

constexpr const char* kHeader =
    "# vramspill trace 1\n"
    "# pid 4242\n"
    "# start_unix_ns 1764662400000000000\n"
    "# command python train.py\n";

Plan plan_of(const std::string& events, int device = 0) {
  std::istringstream input(std::string(kHeader) + events);
  return make_plan(telemetry::parse_trace(input, "job.trace"), device, "job.trace");
}

// The message make_plan() throws for `events`.
std::string error_of(const std::string& events) {
  try {
    plan_of(events);
  } catch (const PlanError& error) {
    return error.what();
  }
  return "(no error)";
}

using Kind = PlannedAction::Kind;

TEST(PlayPlan, AllocationsFreesAndLaunchesInTraceOrder) {
  const Plan plan = plan_of(
      "0 device 0 85899345920 21474836480\n"
      "10 alloc 0 tiered 0x7f0000000000 4194304\n"
      "20 alloc 0 cuMemAlloc 0x7f1000000000 1000\n"
      "30 evict 0 0x7f0000000000 4194304\n"
      "40 use 0 0 0x7f0000000000 0x7f1000000000 0x7f0000000000\n"
      "41 promote 0 0x7f0000000000 4194304\n"
      "50 use 0 77 0x7f1000000000\n"
      "60 free 0 tiered 0x7f0000000000 4194304\n"
      "70 alloc 0 tiered 0x7f0000000000 2097152\n"
      "80 use 0 0 0x7f0000000000\n"
      "90 refuse 0 cuMemAlloc 2147483648\n");
  ASSERT_EQ(plan.blocks.size(), 3u);
  EXPECT_EQ(plan.blocks[0].key, 0x7f0000000000u);
  EXPECT_EQ(plan.blocks[1].bytes, 1000u);
  EXPECT_EQ(plan.blocks[2].bytes, 2097152u);  // the same key allocated again: a new block
  EXPECT_EQ(plan.blocks[2].event, 9u);
  EXPECT_EQ(plan.streams, (std::vector<uint64_t>{0, 77}));
  const std::vector<Kind> kinds{Kind::kAlloc, Kind::kAlloc, Kind::kLaunch, Kind::kLaunch,
                                Kind::kFree, Kind::kAlloc, Kind::kLaunch};
  ASSERT_EQ(plan.actions.size(), kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) EXPECT_EQ(plan.actions[i].kind, kinds[i]) << i;
  // A block named twice is touched once.
  EXPECT_EQ(plan.actions[2].block_count, 2u);
  EXPECT_EQ(plan.launch_blocks[plan.actions[2].first_block + 1], 1u);
  EXPECT_EQ(plan.actions[3].stream, 1u);
  EXPECT_EQ(plan.launch_blocks[plan.actions[6].first_block], 2u);
  EXPECT_EQ(plan.launches, 3u);
  EXPECT_EQ(plan.frees, 1u);
  EXPECT_EQ(plan.moves_ignored, 2u);
}

TEST(PlayPlan, OtherDevicesAndEmptyAllocationsAreLeftOut) {
  const Plan plan = plan_of(
      "10 alloc 1 tiered 0x7f0000000000 4194304\n"
      "20 alloc 0 cuMemAlloc 0x7f1000000000 0\n"
      "30 use 1 0 0x7f0000000000\n"
      "40 free 0 cuMemAlloc 0x7f1000000000 0\n",
      0);
  EXPECT_TRUE(plan.blocks.empty());
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_EQ(plan.other_device_events, 2u);
  EXPECT_EQ(plan.empty_allocations, 1u);
  std::istringstream input(std::string(kHeader) + "10 alloc 1 tiered 0x7f0000000000 4194304\n");
  EXPECT_EQ(first_allocating_device(telemetry::parse_trace(input, "job.trace")), 1);
}

TEST(PlayPlan, ErrorsNameTheEventAndWhatWasExpected) {
  EXPECT_EQ(error_of("10 alloc 0 tiered 0x7f0000000000 4194304\n"
                     "25 use 0 0 0x7f0000000000 0x7f0000100000\n"),
            "job.trace: event 2 (use at 25 ns): names block 0x7f0000100000, which is not live: "
            "expected the base of an allocation of device 0 not yet freed");
  EXPECT_EQ(error_of("10 free 0 tiered 0x7f0000000000 4194304\n"),
            "job.trace: event 1 (free at 10 ns): frees 0x7f0000000000, which no earlier alloc of "
            "device 0 holds");
  EXPECT_EQ(error_of("10 alloc 0 tiered 0x7f0000000000 4194304\n"
                     "20 alloc 0 tiered 0x7f0000000000 4194304\n"),
            "job.trace: event 2 (alloc at 20 ns): allocates 0x7f0000000000, which is live "
            "(allocated by event 1 and not freed)");
}

TEST(PlayerSteps, EqualSlicesCoverEveryLaunch) {
  EXPECT_EQ(divide_into_steps(10, 3, "").ends, (std::vector<size_t>{3, 6, 10}));
  EXPECT_EQ(divide_into_steps(0, 1, "").ends, (std::vector<size_t>{0}));
}

TEST(PlayerSteps, TheShortestLagThatRepeatsAboutAsWellAsTheBest) {
  // A warm-up of 5 launches, then 6 steps of 20, the third launch of each step different every
  // other step: a lag of two steps matches better (94%), but one step nearly as well (90%).
  std::vector<uint64_t> launches{100, 101, 102, 103, 104};
  for (uint64_t step = 0; step < 6; ++step)
    for (uint64_t launch = 0; launch < 20; ++launch)
      launches.push_back(launch == 2 ? 50 + step % 2 : launch);
  const Period period = find_period(launches);
  EXPECT_EQ(period.lag, 20u);
  EXPECT_NEAR(period.matching, 95.0 / 105, 1e-9);
  // Launches that do not repeat have no period.
  EXPECT_EQ(find_period(std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}).lag, 0u);
  EXPECT_EQ(find_period(std::vector<uint64_t>{1}).lag, 0u);
}

TEST(PlayerSteps, FoundFromTheKeysOfEachLaunch) {
  // Three steps of three launches, the activation freed and allocated again at the same address.
  std::string events = "1 alloc 0 tiered 0x1000000 4194304\n";
  for (int step = 0; step < 3; ++step)
    events +=
        "2 alloc 0 tiered 0x2000000 4194304\n"
        "3 use 0 0 0x1000000 0x2000000\n"
        "4 use 0 0 0x2000000\n"
        "5 use 0 9 0x1000000\n"
        "6 free 0 tiered 0x2000000 4194304\n";
  const Steps steps = find_steps(plan_of(events));
  EXPECT_EQ(steps.ends, (std::vector<size_t>{3, 6, 9}));
  EXPECT_EQ(steps.how, "found: the launches repeat every 3 (100% of them alike)");
}

}  // namespace
}  // namespace vramspill::player
