// What the granule arena's tests share: an arena over the fake VMM calls that checks its books
// and the driver's rules after each test, blocks whose granules carry tags, and a stand-in for
// the tracked window's QueuedWork.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/remap_window.h"
#include "fake_granule_ops.h"
#include "tiers/granule_arena.h"

namespace vramspill::tiers {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
using Call = FakeGranuleOps::Call;

class GranuleArenaTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::string problem;
    EXPECT_TRUE(arena_.check_invariants(&problem)) << problem;
    EXPECT_TRUE(ops_.misuse().empty()) << ops_.misuse().front();
  }

  CUdeviceptr allocate(uint64_t bytes, uint64_t device_granules) {
    CUdeviceptr base = 0;
    EXPECT_EQ(arena_.allocate(bytes, device_granules, &base), CUDA_SUCCESS);
    return base;
  }

  FakeGranuleOps ops_;
  GranuleArena arena_{ops_, ArenaOptions{.keep_device_granules = 2, .keep_host_granules = 1}};
};

// Moves (Note [Moving a granule]): each test tags every granule of its blocks and checks the
// tags are where they were after the move, whatever moved.
class GranuleMoveTest : public GranuleArenaTest {
 protected:

  CUdeviceptr tagged_block(uint64_t granules, uint64_t device_granules) {
    const CUdeviceptr base = allocate(granules * kGranuleBytes, device_granules);
    for (uint64_t i = 0; i < granules; ++i) ops_.write(base + i * kGranuleBytes, base + i);
    return base;
  }
  void expect_tags(CUdeviceptr base, uint64_t granules) {
    for (uint64_t i = 0; i < granules; ++i)
      EXPECT_EQ(ops_.read(base + i * kGranuleBytes), base + i) << "granule " << i;
  }
  std::vector<GranuleKind> kinds(CUdeviceptr base, uint64_t granules) {
    std::vector<GranuleKind> found;
    for (uint64_t i = 0; i < granules; ++i)
      found.push_back(*ops_.mapped_kind(base + i * kGranuleBytes));
    return found;
  }
  MoveOutcome move(std::vector<GranuleMove> moves) {
    const core::RemapWindow::Exclusive exclusive = window_.close();
    return arena_.move(moves, exclusive);
  }

  core::RemapWindow window_;
  static constexpr GranuleKind kDevice = GranuleKind::kDevice;
  static constexpr GranuleKind kHost = GranuleKind::kHost;
};

// Note [Staged promotions]: what the tracked window would say of the blocks' queued work.
class FakeQueuedWork final : public QueuedWork {
 public:
  CUresult wait_for(std::span<const uint64_t>, GranuleOps&) noexcept override {
    ++waits;
    return CUDA_SUCCESS;
  }
  CUresult order_after(std::span<const uint64_t>, GranuleOps& ops, uint64_t& since) noexcept override {
    ++orders;
    since = 0;
    if (order_result != CUDA_SUCCESS || program_events.empty()) return order_result;
    return ops.queue_copies_after(program_events);
  }
  bool queued_since(uint64_t, uint64_t) noexcept override { return work_found; }
  bool names_every_use(std::span<const uint64_t>) noexcept override { return uses_named; }

  bool work_found = false;  // what queued_since() says of the work since the stage
  bool uses_named = true;   // what names_every_use() says
  CUresult order_result = CUDA_SUCCESS;
  // The events of the program's work on the blocks, which order_after() makes the arena's stream
  // wait for, as the tracked window does where the use tracker has them.
  std::vector<uint64_t> program_events;
  int waits = 0;
  int orders = 0;
};

}  // namespace vramspill::tiers
