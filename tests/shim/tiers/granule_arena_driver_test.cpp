// The granule arena on simcuda's VMM, through the driver calls the shim makes
// (tiers/driver_granule_ops.h), without preloading: a block half on the device and half on the
// host is one range that kernels and copies use byte-exact across the boundary, the device is
// charged for its device granules only, and pooled granules go back at trim().
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/remap_window.h"
#include "kernel_test_support.h"
#include "tiers/driver_granule_ops.h"
#include "tiers/granule_arena.h"

namespace vramspill::tiers {
namespace {

// simcuda's count of remaps under pending work (Note [Remap protocol] in simcuda); 0 on a GPU.
uint64_t remap_violations() {
  using Counter = uint64_t (*)();
  const auto counter = reinterpret_cast<Counter>(dlsym(RTLD_DEFAULT, "simcuda_remap_violations"));
  return counter == nullptr ? 0 : counter();
}

class GranuleArenaDriverTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    int node = -1;
    ASSERT_CU(cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device_));
    ops_.emplace(device_, node);
    arena_.emplace(*ops_, ArenaOptions{});
  }
  void TearDown() override {
    arena_.reset();
    KernelFixture::TearDown();
  }

  // A block of `granules` all on the device, written with a pattern of words: its base; the
  // pattern at `pattern`.
  CUdeviceptr patterned_block(uint64_t granules, std::vector<uint32_t>& pattern) {
    const uint64_t words = granules * kGranuleBytes / 4;
    CUdeviceptr block = 0;
    EXPECT_CU(arena_->allocate(granules * kGranuleBytes, granules, &block));
    pattern.resize(words);
    for (size_t i = 0; i < words; ++i) pattern[i] = static_cast<uint32_t>(i * 2246822519u + 7);
    EXPECT_CU(cuMemcpyHtoD(block, pattern.data(), words * 4));
    return block;
  }

  std::optional<DriverGranuleOps> ops_;
  std::optional<GranuleArena> arena_;
};

// Note [No moves during a capture]: a capture may begin after the mover looked, so its waits look
// again, holding the capture gate, and are refused while one is in progress.
TEST_F(GranuleArenaDriverTest, NoWaitIsMadeWhileACaptureIsInProgress) {
  core::CaptureGate captures;
  constexpr uint64_t kCapturing = 0x7000;
  {
    const auto changing = captures.change();
    captures.begun(kCapturing, 0);
  }
  int node = -1;
  ASSERT_CU(cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device_));
  DriverGranuleOps ops(device_, node, &captures);
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const StreamEnd ends[] = {{.stream = reinterpret_cast<uint64_t>(stream), .event = 0}};
  EXPECT_EQ(ops.synchronize_device(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(ops.wait_for_stream_ends(ends), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  {
    const auto changing = captures.change();
    captures.ended(kCapturing, 0);
    // Another thread's wait while the capture ends: not waited for (the mover holds locks that
    // a thread holding the gate may take), so refused as if the capture went on.
    CUresult while_ending = CUDA_SUCCESS;
    std::thread([&] { while_ending = ops.synchronize_device(); }).join();
    EXPECT_EQ(while_ending, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  }
  EXPECT_CU(ops.synchronize_device());
  EXPECT_CU(ops.wait_for_stream_ends(ends));
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(GranuleArenaDriverTest, ABlockAcrossDeviceAndHostIsOneRangeByteExact) {
  const size_t before = used();
  constexpr uint64_t kBytes = 9 * kMiB;  // five granules
  CUdeviceptr block = 0;
  ASSERT_CU(arena_->allocate(kBytes, 2, &block));
  EXPECT_EQ(used() - before, 2 * kGranuleBytes) << "only the device granules take device memory";

  // A kernel fills the whole block; another copies its first 3 MiB (device granules, and the
  // start of the host part) over the last 3 MiB (all host).
  constexpr uint64_t kWords = kBytes / 4;
  ASSERT_CU(fill(block, 0xA5A5A5A5u, kWords));
  std::vector<uint32_t> pattern(3 * kMiB / 4);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_CU(cuMemcpyHtoD(block + kMiB, pattern.data(), 3 * kMiB));
  ASSERT_CU(copy(block + 6 * kMiB, block + kMiB, 3 * kMiB));
  ASSERT_CU(cuCtxSynchronize());

  const std::vector<uint32_t> words = download<uint32_t>(block, kWords);
  for (size_t i = 0; i < kWords; ++i) {
    const uint64_t byte = i * 4;
    uint32_t expected = 0xA5A5A5A5u;
    if (byte >= kMiB && byte < 4 * kMiB) expected = pattern[(byte - kMiB) / 4];
    if (byte >= 6 * kMiB) expected = pattern[(byte - 6 * kMiB) / 4];
    ASSERT_EQ(words[i], expected) << "word " << i << " (byte " << byte << ")";
  }
  EXPECT_EQ(remap_violations(), 0u);
}

TEST_F(GranuleArenaDriverTest, FreedGranulesStayPooledUntilTrimmed) {
  const size_t before = used();
  CUdeviceptr block = 0;
  ASSERT_CU(arena_->allocate(8 * kMiB, 4, &block));
  ASSERT_TRUE(arena_->free(block));
  EXPECT_EQ(used() - before, 4 * kGranuleBytes) << "pooled device granules are still held";
  CUdeviceptr again = 0;
  ASSERT_CU(arena_->allocate(6 * kMiB, 3, &again));
  EXPECT_EQ(used() - before, 4 * kGranuleBytes) << "the next block reuses them";
  ASSERT_TRUE(arena_->free(again));
  arena_->trim();
  EXPECT_EQ(used(), before);
  std::string problem;
  EXPECT_TRUE(arena_->check_invariants(&problem)) << problem;
}

// Evict, then promote, a block that kernels wrote, on simcuda: every byte survives both moves,
// the device is charged for what is on it after each, and simcuda sees no remap under queued
// work: a kernel is still queued behind a gate when the window closes, and the gate opens only
// later, from another thread, so a mover that did not wait for the device would remap under it.
TEST_F(GranuleArenaDriverTest, MovesKeepEveryByteAtTheSameAddress) {
  const size_t before = used();
  constexpr uint64_t kGranules = 6;
  constexpr uint64_t kWords = kGranules * kGranuleBytes / 4;
  std::vector<uint32_t> pattern;
  const CUdeviceptr block = patterned_block(kGranules, pattern);
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::atomic<bool> gate_open{false};
  ASSERT_CU(cuLaunchHostFunc(
      stream,
      [](void* open) {
        while (!static_cast<std::atomic<bool>*>(open)->load()) std::this_thread::yield();
      },
      &gate_open));
  // Granule 4: one of the four the eviction moves (a block's last device granules go first).
  ASSERT_CU(fill(block + 4 * kGranuleBytes, 0x5EEDu, kGranuleBytes / 4, stream));
  for (size_t i = 4 * kGranuleBytes / 4; i < 5 * kGranuleBytes / 4; ++i) pattern[i] = 0x5EEDu;

  core::RemapWindow window;
  const GranuleMove evict{.base = block, .to = GranuleKind::kHost, .granules = 4};
  std::thread opener([&gate_open] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    gate_open = true;
  });
  MoveOutcome outcome = arena_->move({&evict, 1}, window.close());
  opener.join();
  ASSERT_CU(outcome.result);
  EXPECT_EQ(outcome.to_host, 4u);
  arena_->trim();
  EXPECT_EQ(used() - before, 2 * kGranuleBytes);
  EXPECT_EQ(download<uint32_t>(block, kWords), pattern);

  const GranuleMove promote{.base = block, .to = GranuleKind::kDevice, .granules = 0};
  outcome = arena_->move({&promote, 1}, window.close());
  ASSERT_CU(outcome.result);
  EXPECT_EQ(outcome.to_device, 4u);
  arena_->trim();
  EXPECT_EQ(used() - before, kGranules * kGranuleBytes);
  EXPECT_EQ(download<uint32_t>(block, kWords), pattern);
  EXPECT_EQ(remap_violations(), 0u);
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(GranuleArenaDriverTest, TheDeviceRefusingAGranuleLeavesNothingBehind) {
  const size_t before = used();
  size_t free = 0;
  size_t total = 0;
  ASSERT_CU(cuMemGetInfo(&free, &total));
  const uint64_t too_many = free / kGranuleBytes + 1;
  CUdeviceptr block = 0;
  EXPECT_EQ(arena_->allocate(too_many * kGranuleBytes, too_many, &block), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(arena_->stats().blocks, 0u);
  arena_->trim();
  EXPECT_EQ(used(), before);
}

// Note [Chunks] on simcuda, through the shim's own driver calls: a block of two chunks and three
// singles keeps every byte through an eviction in part (5 granules asked, rounded up to a whole
// chunk and the singles), a promotion and a whole eviction, and leaves nothing behind.
TEST_F(GranuleArenaDriverTest, AChunkedBlockMovesByteExact) {
  constexpr uint64_t kGranules = 35;
  constexpr uint64_t kWords = kGranules * kGranuleBytes / 4;
  std::vector<uint32_t> pattern;
  const CUdeviceptr block = patterned_block(kGranules, pattern);
  core::RemapWindow window;
  const GranuleMove evict{.base = block, .to = GranuleKind::kHost, .granules = 5};
  MoveOutcome outcome = arena_->move({&evict, 1}, window.close());
  ASSERT_CU(outcome.result);
  EXPECT_EQ(outcome.to_host, 19u);
  EXPECT_EQ(download<uint32_t>(block, kWords), pattern);
  const GranuleMove promote{.base = block, .to = GranuleKind::kDevice, .granules = 0};
  outcome = arena_->move({&promote, 1}, window.close());
  ASSERT_CU(outcome.result);
  EXPECT_EQ(outcome.to_device, 19u);
  EXPECT_EQ(download<uint32_t>(block, kWords), pattern);
  const GranuleMove all{.base = block, .to = GranuleKind::kHost, .granules = 0};
  outcome = arena_->move({&all, 1}, window.close());
  ASSERT_CU(outcome.result);
  EXPECT_EQ(download<uint32_t>(block, kWords), pattern);
  ASSERT_TRUE(arena_->free(block));
  arena_->trim();
  std::string problem;
  EXPECT_TRUE(arena_->check_invariants(&problem)) << problem;
  EXPECT_EQ(arena_->stats().leaked_granules, 0u);
  EXPECT_EQ(arena_->stats().unbacked_granules, 0u);
  EXPECT_EQ(remap_violations(), 0u);
}

}  // namespace
}  // namespace vramspill::tiers
