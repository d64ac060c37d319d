// The prefetch mover on simcuda's managed memory, through the driver calls the shim makes
// (tiers/driver_prefetch_ops.h) and tiered placement's decisions (placement/prefetch_placement.h),
// without preloading: over a budget of three blocks, kernels on two streams touch eight blocks
// as the shim would hand them over, most of a round's launches on a hot set that moves on each
// round (so that promotions pay and are admitted, Note [Admitting a promotion]; both lanes run,
// Note [Two lanes]), and after each round the books agree with the driver: a
// block is on the device (CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION is the device, and the
// device is charged for it) exactly when the books say so, and every byte survives.
#include <cstdint>
#include <random>
#include <shared_mutex>
#include <vector>

#include "../placement/fake_tiered_budgets.h"
#include "kernel_test_support.h"
#include "placement/prefetch_placement.h"
#include "tiers/driver_prefetch_ops.h"

namespace vramspill::placement {
namespace {

constexpr uint64_t kBlock = 4 * kMiB;
constexpr uint64_t kWords = kBlock / 4;

class OneDevice final : public PrefetchDevices {
 public:
  explicit OneDevice(int device) : ops_(device, /*peers=*/{}, capture_gate_) {}
  tiers::PrefetchOps* ops(int) noexcept override { return &ops_; }
  bool may_move() noexcept override { return true; }

 private:
  std::shared_mutex capture_gate_;  // no capture begins here
  tiers::DriverPrefetchOps ops_;
};

class PrefetchMoverDriverTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    for (CUstream& stream : streams_) ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    devices_.emplace(device_);
    placement_.emplace(budgets_, *devices_,
                       TieredOptions{.policy = "lru",
                                     .invariant_mode = policies::InvariantMode::kAbort});
  }
  void TearDown() override {
    placement_.reset();
    devices_.reset();
    for (CUstream stream : streams_) cuStreamDestroy(stream);
    KernelFixture::TearDown();
  }

  // What the shim does before a submission reaches the driver (placement/submission_order.h).
  void before(CUstream stream, std::initializer_list<CUdeviceptr> blocks) {
    core::SubmissionUse use;
    use.sequence = ++sequence_;
    use.stream = reinterpret_cast<uint64_t>(stream);
    for (const CUdeviceptr block : blocks) use.blocks[use.count++] = block;
    placement_->before_submission(use);
  }

  static int last_prefetch_location(CUdeviceptr block) {
    int location = -3;
    EXPECT_CU(cuMemRangeGetAttribute(&location, sizeof(location),
                                     CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, block, kBlock));
    return location;
  }

  FakeBudgets budgets_{3 * kBlock, 64 * kBlock};
  std::optional<OneDevice> devices_;
  std::optional<PrefetchPlacement> placement_;
  CUstream streams_[2] = {};
  uint64_t sequence_ = 0;
};

TEST_F(PrefetchMoverDriverTest, TheBooksAgreeWithTheDriverAndEveryByteSurvives) {
  const size_t before_blocks = used();
  std::vector<CUdeviceptr> blocks(8);
  std::vector<uint32_t> values(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(placement_->allocate(0, kBlock, &blocks[i]), CUDA_SUCCESS);
    values[i] = static_cast<uint32_t>(0x1000 + i);
    before(streams_[i % 2], {blocks[i]});
    ASSERT_CU(fill(blocks[i], values[i], kWords, streams_[i % 2]));
  }
  std::mt19937 random(25);
  for (int round = 0; round < 12; ++round) {
    // Three blocks of eight, the next three each round; one launch in eight anywhere.
    const auto draw = [&] {
      const size_t hot = (static_cast<size_t>(round) * 3 + random() % 3) % blocks.size();
      return random() % 8 == 0 ? random() % blocks.size() : hot;
    };
    for (int step = 0; step < 24; ++step) {
      const size_t target = draw();
      const size_t source = draw();
      // Each block's own stream, so that two writes of one block never race.
      CUstream stream = streams_[target % 2];
      if (source == target || step % 3 == 0) {
        values[target] = static_cast<uint32_t>(random());
        before(stream, {blocks[target]});
        ASSERT_CU(fill(blocks[target], values[target], kWords, stream));
      } else {
        // Both streams' work on the source is done before the copy reads it.
        ASSERT_CU(cuCtxSynchronize());
        before(stream, {blocks[target], blocks[source]});
        ASSERT_CU(copy(blocks[target], blocks[source], kBlock, stream));
        values[target] = values[source];
      }
    }
    ASSERT_CU(cuCtxSynchronize());
    uint64_t books_on_device = 0;
    for (const CUdeviceptr block : blocks) {
      const bool on_device = placement_->on_device(block).value();
      books_on_device += on_device ? kBlock : 0;
      EXPECT_EQ(last_prefetch_location(block) == device_, on_device)
          << "round " << round << ", block " << std::hex << block;
    }
    EXPECT_LE(books_on_device, 3 * kBlock);
    EXPECT_EQ(budgets_.device(), books_on_device);
    EXPECT_EQ(used() - before_blocks, books_on_device) << "round " << round;
  }
  const PrefetchStats stats = placement_->stats();
  EXPECT_GT(stats.promotions, blocks.size());
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_EQ(stats.failed_prefetches, 0u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::vector<uint32_t> words = download<uint32_t>(blocks[i], kWords);
    for (size_t w = 0; w < kWords; ++w)
      ASSERT_EQ(words[w], values[i]) << "block " << i << ", word " << w;
  }
  for (const CUdeviceptr block : blocks) EXPECT_EQ(placement_->free(block), CUDA_SUCCESS);
  EXPECT_EQ(used(), before_blocks);
  EXPECT_EQ(budgets_.host(), 0u);
}

// Note [Two lanes]: an eviction waits for the promotions queued before it, on the other stream,
// so that a block brought in and sent out before any use ends on the host, as the books say. The
// stream that asked for each promotion is forgotten first (as if destroyed), so that only the
// lanes order the eviction after it, as for a block promoted ahead of its launch. Unordered,
// simcuda's streams would run the two in whichever order their threads reach them, and the block
// would end on the device in some of the rounds.
TEST_F(PrefetchMoverDriverTest, AnEvictionFollowsThePromotionQueuedBeforeIt) {
  // A block with contents (a block no one wrote is made where it is first wanted: simcuda's
  // Note [Pages before their first touch]).
  CUdeviceptr block = 0;
  ASSERT_EQ(placement_->allocate(0, kBlock, &block), CUDA_SUCCESS);
  before(streams_[0], {block});
  ASSERT_CU(fill(block, 7, kWords, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(placement_->make_device_room(0, 3 * kBlock));
    ASSERT_FALSE(placement_->on_device(block).value());
    before(streams_[1], {block});
    ASSERT_TRUE(placement_->on_device(block).value()) << "round " << round;
    placement_->stream_ended(reinterpret_cast<uint64_t>(streams_[1]));
    ASSERT_TRUE(placement_->make_device_room(0, 3 * kBlock));
    ASSERT_CU(cuCtxSynchronize());
    EXPECT_FALSE(placement_->on_device(block).value());
    EXPECT_NE(last_prefetch_location(block), device_) << "round " << round;
  }
  const std::vector<uint32_t> words = download<uint32_t>(block, kWords);
  EXPECT_EQ(words, std::vector<uint32_t>(kWords, 7u));
  EXPECT_EQ(placement_->free(block), CUDA_SUCCESS);
}

}  // namespace
}  // namespace vramspill::placement
