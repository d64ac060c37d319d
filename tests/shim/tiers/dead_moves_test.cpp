// GranuleArena moves of blocks whose contents are dead (Note [Moves of dead contents] in
// tiers/granule_arena.h): remapped with no home and no copy, beside live blocks whose
// bytes still move with them.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "arena_test_fixtures.h"

namespace vramspill::tiers {
namespace {

class DeadSet final : public DeadContents {
 public:
  bool dead(uint64_t base) const noexcept override { return bases.contains(base); }
  std::set<uint64_t> bases;
};

class DeadMoveTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::string problem;
    EXPECT_TRUE(arena_.check_invariants(&problem)) << problem;
    EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  }

  CUdeviceptr tagged_block(uint64_t granules, uint64_t device_granules) {
    CUdeviceptr base = 0;
    EXPECT_EQ(arena_.allocate(granules * kGranuleBytes, device_granules, &base), CUDA_SUCCESS);
    for (uint64_t i = 0; i < granules; ++i) ops_.write(base + i * kGranuleBytes, base + i);
    return base;
  }
  GranuleKind kind(CUdeviceptr base, uint64_t granule) {
    return *ops_.mapped_kind(base + granule * kGranuleBytes);
  }
  MoveOutcome move(std::vector<GranuleMove> moves) {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    return arena_.move(moves, exclusive);
  }

  FakeGranuleOps ops_;
  DeadSet dead_;
  GranuleArena arena_{ops_, ArenaOptions{.keep_device_granules = 2,
                                         .keep_host_granules = 1,
                                         .dead = &dead_}};
  core::RemapWindow window_;
  FakeQueuedWork queued_;
};

TEST_F(DeadMoveTest, ADeadBlockMovesWithoutACopyBesideALiveOneThatKeepsItsBytes) {
  const CUdeviceptr live = tagged_block(2, 2);
  const CUdeviceptr dead = tagged_block(2, 2);
  dead_.bases.insert(dead);
  const int reserved_before = ops_.calls(Call::kReserve);
  const MoveOutcome outcome = move({{.base = live, .to = GranuleKind::kHost, .granules = 0},
                                    {.base = dead, .to = GranuleKind::kHost, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_host, 4u);
  for (uint64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(kind(live, i), GranuleKind::kHost);
    EXPECT_EQ(kind(dead, i), GranuleKind::kHost);
    EXPECT_EQ(ops_.read(live + i * kGranuleBytes), live + i) << "the live block's bytes moved";
  }
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "one copy: the live block's run";
  EXPECT_EQ(ops_.calls(Call::kReserve) - reserved_before, 1) << "one range of homes, the live's";
  EXPECT_EQ(arena_.stats().homes, 4u) << "the live block's old and new granules only";
  EXPECT_EQ(ops_.calls(Call::kSynchronize), 1) << "the device's work is waited for first";
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.host_granules, 4u);
  EXPECT_EQ(stats.device_granules, 0u);
}

TEST_F(DeadMoveTest, ADeadBlockAloneNeedsNoHomes) {
  const CUdeviceptr dead = tagged_block(3, 0);
  dead_.bases.insert(dead);
  const int reserved_before = ops_.calls(Call::kReserve);
  const MoveOutcome outcome = move({{.base = dead, .to = GranuleKind::kDevice, .granules = 0}});
  EXPECT_EQ(outcome.result, CUDA_SUCCESS);
  EXPECT_EQ(outcome.to_device, 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(kind(dead, i), GranuleKind::kDevice);
  EXPECT_EQ(ops_.calls(Call::kCopy), 0);
  EXPECT_EQ(ops_.calls(Call::kReserve), reserved_before);
  const ArenaStats stats = arena_.stats();
  EXPECT_EQ(stats.homes, 0u);
  EXPECT_EQ(stats.device_granules, 3u);
  EXPECT_EQ(stats.host_granules, 0u);
}

// Note [Staged promotions]: a stage takes the stream bits of the work before its copy off the
// use tracker's books, so only the arena's stream still waits for that work. A dead block's remap
// has no copy of its own on that stream, and must wait for it before unmapping, as a live move
// does.
TEST_F(DeadMoveTest, AfterAStageADeadBlocksRemapWaitsForTheArenasStreamFirst) {
  const CUdeviceptr ahead = tagged_block(1, 0);
  const CUdeviceptr dead = tagged_block(1, 0);
  dead_.bases.insert(dead);
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove stage{.base = ahead, .to = GranuleKind::kDevice, .granules = 0};
    ASSERT_EQ(arena_.stage(std::span(&stage, 1), exclusive, queued_).to_device, 1u);
  }
  const std::size_t before = ops_.sequence().size();
  {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    const GranuleMove promotion{.base = dead, .to = GranuleKind::kDevice, .granules = 0};
    ASSERT_EQ(arena_.move(std::span(&promotion, 1), exclusive, &queued_).to_device, 1u);
  }
  const std::vector<Call>& calls = ops_.sequence();
  const auto from = calls.begin() + static_cast<std::ptrdiff_t>(before);
  const auto first_unmap = std::find(from, calls.end(), Call::kUnmap);
  ASSERT_NE(first_unmap, calls.end());
  EXPECT_NE(std::find(from, first_unmap, Call::kWait), first_unmap)
      << "the arena's stream is waited for before the remap";
  EXPECT_EQ(ops_.calls(Call::kCopy), 1) << "the stage's copy alone";
}

}  // namespace
}  // namespace vramspill::tiers
