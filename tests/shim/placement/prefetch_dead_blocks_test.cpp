// Dead blocks and the prefetch mover (Note [Dead blocks and the prefetch mover] in
// placement/stream_ordered_blocks.h), over fake prefetch calls and fake budgets: a dead block on
// the device is freed for room before any block is evicted, but never one the submission at hand
// names (its caller still holds it), and a dead block is never brought in (its bytes are dead).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <initializer_list>
#include <string>
#include <vector>

#include "fake_tiered_budgets.h"
#include "placement_fakes.h"
#include "placement/prefetch_placement.h"
#include "prefetch_fakes.h"

namespace vramspill::placement {
namespace {

using tiers::kGranuleBytes;

constexpr uint64_t kBlock = 2 * kGranuleBytes;

// The blocks named dead, given up as the mover asks.
class FakeDeadBlocks final : public DeadBlocks {
 public:
  std::vector<uint64_t> bases;
  std::vector<uint64_t> given_up;

  std::vector<uint64_t> dead() noexcept override { return bases; }
  bool is_dead(CUdeviceptr base) noexcept override {
    return std::ranges::find(bases, base) != bases.end();
  }
  bool give_up_if_dead(CUdeviceptr base) noexcept override {
    if (!is_dead(base)) return false;
    std::erase(bases, base);
    given_up.push_back(base);
    return true;
  }
};

class PrefetchDeadBlocksTest : public ::testing::Test {
 protected:
  PrefetchDeadBlocksTest() { placement_.set_dead_blocks(&dead_); }

  // Two blocks fill the budget, `b_` used last; `c_`, made first, was evicted to the host to
  // make room for them.
  void SetUp() override {
    c_ = allocate();
    ASSERT_TRUE(placement_.make_device_room(0, 2 * kBlock));
    a_ = allocate();
    b_ = allocate();
    launch({b_});
    ASSERT_EQ(placement_.device_bytes(c_), 0u);
    ops().prefetches.clear();
  }

  CUdeviceptr allocate() {
    CUdeviceptr base = 0;
    EXPECT_EQ(placement_.allocate(0, kBlock, &base), CUDA_SUCCESS);
    return base;
  }
  void launch(std::initializer_list<CUdeviceptr> blocks) {
    core::SubmissionUse use;
    use.sequence = ++sequence_;
    use.stream = 1;
    for (const CUdeviceptr block : blocks) use.blocks[use.count++] = block;
    placement_.before_submission(use);
  }
  FakePrefetchOps& ops() { return devices_.fake(); }
  bool released(CUdeviceptr base) {
    return std::ranges::find(ops().released, base) != ops().released.end();
  }
  uint64_t evictions() {
    return static_cast<uint64_t>(std::ranges::count_if(
        ops().prefetches, [](const Prefetch& prefetch) { return !prefetch.to_device; }));
  }

  FakeBudgets budgets_{2 * kBlock, 64 * kBlock};
  FakeDevices devices_;
  FakeDeadBlocks dead_;
  PrefetchPlacement placement_{budgets_,
                               devices_,
                               {.policy = "lru",
                                .admission = TieredAdmission::kAlways,
                                .invariant_mode = policies::InvariantMode::kAbort}};
  CUdeviceptr a_ = 0;
  CUdeviceptr b_ = 0;
  CUdeviceptr c_ = 0;
  uint64_t sequence_ = 0;
};

TEST_F(PrefetchDeadBlocksTest, ADeadBlockOnTheDeviceIsFreedForRoomBeforeAnyEviction) {
  dead_.bases = {b_};  // not the least recently used: lru would evict a_
  launch({c_});
  EXPECT_TRUE(released(b_));
  EXPECT_EQ(evictions(), 0u);
  EXPECT_FALSE(placement_.device_bytes(b_).has_value());
  EXPECT_EQ(placement_.device_bytes(c_), kBlock);
  EXPECT_EQ(placement_.device_bytes(a_), kBlock);
  EXPECT_EQ(placement_.stats().dead_freed, 1u);
}

// The submission names the dead block too (a word of its arguments that matches, or a program
// that uses memory it freed): it is not freed under the launch, and the room is made otherwise.
TEST_F(PrefetchDeadBlocksTest, ADeadBlockTheLaunchNamesIsNotFreedForItsRoom) {
  dead_.bases = {a_};
  launch({c_, a_});
  EXPECT_FALSE(released(a_));
  EXPECT_EQ(placement_.device_bytes(a_), kBlock);
  EXPECT_EQ(placement_.device_bytes(b_), 0u);  // evicted instead
  EXPECT_EQ(placement_.device_bytes(c_), kBlock);
}

// A dead block on the host is not brought in: its promotion would copy bytes nothing reads, and,
// its room being made by freeing dead blocks, could free the very block it moves.
TEST_F(PrefetchDeadBlocksTest, ADeadBlockIsNotBroughtIn) {
  dead_.bases = {c_};
  launch({c_});
  EXPECT_EQ(placement_.device_bytes(c_), 0u);
  EXPECT_TRUE(ops().prefetches.empty());
  EXPECT_FALSE(released(c_));
}

// Not even one a [[tiered.rule]] pins, which otherwise comes in whatever the policy says.
TEST_F(PrefetchDeadBlocksTest, APinnedDeadBlockIsNotBroughtIn) {
  const std::optional<uint64_t> card_free = ops().free;
  ops().free = 0;  // so that it is made on the host: the card has no room for it
  CUdeviceptr pinned = 0;
  ASSERT_EQ(placement_.allocate(0, kBlock, &pinned, RuleAction::kPin), CUDA_SUCCESS);
  ops().free = card_free;
  ASSERT_EQ(placement_.device_bytes(pinned), 0u);
  dead_.bases = {pinned};
  launch({pinned});
  EXPECT_EQ(placement_.device_bytes(pinned), 0u);
  EXPECT_TRUE(ops().prefetches.empty());
}

// A dead block the driver will not free stays in the books, on the device and in the budget
// (its owner has let it go, so it is kept until the process ends, which the log says), and the
// room is made by an eviction instead.
TEST_F(PrefetchDeadBlocksTest, ADeadBlockTheDriverWillNotFreeStaysInTheBooks) {
  LogCapture log;
  dead_.bases = {b_};
  ops().fail_releases = true;
  launch({c_});
  EXPECT_EQ(dead_.given_up, std::vector<uint64_t>{b_});
  EXPECT_EQ(placement_.device_bytes(b_), kBlock);
  EXPECT_EQ(placement_.device_bytes(a_), 0u);  // evicted for the room
  EXPECT_EQ(placement_.device_bytes(c_), kBlock);
  EXPECT_EQ(budgets_.device(), 2 * kBlock);
  EXPECT_EQ(placement_.stats().dead_freed, 0u);
  EXPECT_NE(log.text().find("freeing a dead block of 4194304 bytes failed"), std::string::npos)
      << log.text();
}

// Nothing is freed while a capture is in progress: cuMemFree would break it.
TEST_F(PrefetchDeadBlocksTest, NoDeadBlockIsFreedDuringACapture) {
  dead_.bases = {b_};
  devices_.moves = false;
  EXPECT_FALSE(placement_.make_device_room(0, kBlock));
  EXPECT_FALSE(released(b_));
  EXPECT_TRUE(dead_.given_up.empty());
}

}  // namespace
}  // namespace vramspill::placement
