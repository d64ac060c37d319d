// When host memory runs out too (shim/README.md, "Budgets and honesty"), and when the spill path
// itself fails (SIMCUDA_FAIL): CUDA_ERROR_OUT_OF_MEMORY, cleanly, with nothing already allocated
// lost; and the bytes come back when the spilled blocks are freed. Each case runs in its own
// environment (CMakeLists.txt), which also checks the log lines.
#include <sys/resource.h>

#include <cstdio>

#include "spill_support.h"

namespace {

using spill::kBlock;
using spill::kMiB;
using spill::pattern;
using spill::Tier;
using spill::tier_name;
using spill::tier_of;

constexpr size_t kWords = kBlock / sizeof(uint32_t);

class Limits : public spill::SpillTest {
 protected:
  void TearDown() override {
    free_all(blocks_);
    EXPECT_EQ(free_bytes(), expected_free(0));
    SpillTest::TearDown();
  }

  // With the device's share of the budget full, the first block that would spill is refused
  // cleanly: nothing returned, nothing held for it, every block before it intact.
  void expect_first_spill_refused() {
    ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
    CUdeviceptr pointer = 0;
    EXPECT_EQ(allocate_block(7, pointer), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(pointer, 0u);
    EXPECT_EQ(free_bytes(), expected_free(device_count_ * kBlock));
    ASSERT_NO_FATAL_FAILURE(expect_all_intact());
  }

  // A new block with pattern `seed` written from the host; its result, and the block in
  // blocks_ on success.
  CUresult allocate_block(uint32_t seed, CUdeviceptr& pointer) {
    pointer = 0;
    const CUresult result = cuMemAlloc(&pointer, kBlock);
    if (result != CUDA_SUCCESS) return result;
    blocks_.push_back(pointer);
    seeds_.push_back(seed);
    std::vector<uint32_t> host(kWords);
    for (size_t j = 0; j < kWords; ++j) host[j] = pattern(seed, j);
    EXPECT_CU(cuMemcpyHtoD(pointer, host.data(), kBlock));
    return result;
  }

  // Every block still holds its pattern.
  void expect_all_intact() {
    std::vector<uint32_t> scratch;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const uint32_t seed = seeds_[i];
      const size_t at = first_mismatch(
          blocks_[i], kWords, [seed](size_t j) { return pattern(seed, j); }, scratch);
      EXPECT_EQ(at, kWords) << "block " << i << " (" << tier_name(tier_of(blocks_[i]))
                            << ") lost its bytes at word " << at;
    }
  }

  void fill_device_with_patterns() {
    for (size_t i = 0, count = device_capacity(kBlock); i < count; ++i) {
      CUdeviceptr pointer = 0;
      ASSERT_CU(allocate_block(static_cast<uint32_t>(1000 + i), pointer));
      ASSERT_EQ(tier_of(pointer), Tier::kDevice);
    }
    device_count_ = blocks_.size();
  }

  void free_spilled() {
    while (blocks_.size() > device_count_) {
      ASSERT_CU(cuMemFree(blocks_.back()));
      blocks_.pop_back();
      seeds_.pop_back();
    }
  }

  std::vector<CUdeviceptr> blocks_;
  std::vector<uint32_t> seeds_;
  size_t device_count_ = 0;
};

// SPILL_HOST_LIMIT_MIB: the host limit CMakeLists.txt sets (VRAMSPILL_SPILL_HOST_LIMIT).
size_t host_limit() {
  const char* value = std::getenv("SPILL_HOST_LIMIT_MIB");
  return value != nullptr ? std::strtoull(value, nullptr, 10) * kMiB : 0;
}

// Spills succeed up to the host limit, exactly; the next is CUDA_ERROR_OUT_OF_MEMORY (by every
// linear route) and every block allocated before, on the device or spilled, keeps its bytes.
// Freed, the spilled bytes come back: the same amount spills again, twice.
TEST_F(Limits, HostLimitExhaustionIsOutOfMemoryAndLosesNothing) {
  const size_t limit = host_limit();
  ASSERT_GT(limit, 0u) << "SPILL_HOST_LIMIT_MIB is not set";
  ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
  for (uint32_t round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    size_t spilled = 0;
    for (;;) {
      CUdeviceptr pointer = 0;
      const CUresult result = allocate_block(round * 100 + static_cast<uint32_t>(spilled), pointer);
      if (result != CUDA_SUCCESS) {
        EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
        EXPECT_EQ(pointer, 0u);
        break;
      }
      ASSERT_EQ(tier_of(pointer), spill::expected_tier());
      ASSERT_LE(++spilled, limit / kBlock) << "spilled past the host limit";
    }
    EXPECT_EQ(spilled, limit / kBlock);
    std::printf("round %u: %zu blocks spilled before the host limit\n", round, spilled);
    CUdeviceptr pointer = 0;
    EXPECT_EQ(cuMemAlloc(&pointer, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(cuMemAllocAsync(&pointer, kBlock, stream_), CUDA_ERROR_OUT_OF_MEMORY);
    size_t pitch = 0;
    EXPECT_EQ(cuMemAllocPitch(&pointer, &pitch, 4096, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(pointer, 0u);
    EXPECT_EQ(free_bytes(), expected_free(device_count_ * kBlock));
    ASSERT_NO_FATAL_FAILURE(expect_all_intact());
    ASSERT_NO_FATAL_FAILURE(free_spilled());
  }
}

// SIMCUDA_FAIL=cuMemAllocManaged@1=CUDA_ERROR_OUT_OF_MEMORY in auto mode: the first spill's
// managed allocation fails, so it goes to the next tier, the pinned host pool; the second
// spill is managed again.
TEST_F(Limits, ManagedFailureFallsBackToTheHostPool) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
  CUdeviceptr first = 0;
  ASSERT_CU(allocate_block(1, first));
  EXPECT_EQ(tier_of(first), Tier::kHost) << tier_name(tier_of(first));
  CUdeviceptr second = 0;
  ASSERT_CU(allocate_block(2, second));
  EXPECT_EQ(tier_of(second), Tier::kManaged) << tier_name(tier_of(second));
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

// SIMCUDA_FAIL=cuMemAllocManaged@1=...,cuMemHostAlloc@1=... in auto mode: the managed
// allocation fails, and so does the host pool's pinning; a clean CUDA_ERROR_OUT_OF_MEMORY, nothing
// held for it, nothing lost. The failures were passing: the next spill works (managed again).
TEST_F(Limits, EveryTierFailingIsOutOfMemory) {
  ASSERT_NO_FATAL_FAILURE(expect_first_spill_refused());
  CUdeviceptr pointer = 0;
  ASSERT_CU(allocate_block(8, pointer));
  EXPECT_EQ(tier_of(pointer), Tier::kManaged) << tier_name(tier_of(pointer));
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

// SIMCUDA_FAIL=cuMemAllocManaged@1=CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,cuMemHostAlloc@1=... in
// auto mode, as another thread's global-mode capture refuses both: the program gets the capture's
// error, as from the driver's own cuMemAlloc then, not out of memory; and the next spill works.
TEST_F(Limits, ACaptureRefusingEveryTierIsTheCapturesError) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
  CUdeviceptr pointer = 0;
  EXPECT_EQ(allocate_block(7, pointer), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(pointer, 0u);
  ASSERT_CU(allocate_block(8, pointer));
  EXPECT_EQ(tier_of(pointer), Tier::kManaged) << tier_name(tier_of(pointer));
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

// Note [The pool's thread and captures] in shim/tiers/host_tier.h: a stream-ordered request over
// the budget on a stream that is not captured, while another stream captures in global mode,
// does not pin on its own thread (pinning beside a capture breaks it): the pool has no room
// without a pin, so the request is refused, and the capture ends with its graph.
TEST_F(Limits, AStreamOrderedSpillBesideACaptureDoesNotPin) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
  CUstream capturing = nullptr;
  ASSERT_CU(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr pointer = 0;
  EXPECT_NE(cuMemAllocAsync(&pointer, kBlock, stream_), CUDA_SUCCESS) << "a pin was made";
  CUgraph graph = nullptr;
  EXPECT_CU(cuStreamEndCapture(capturing, &graph));
  EXPECT_NE(graph, nullptr) << "the capture was broken";
  if (graph != nullptr) {
    EXPECT_CU(cuGraphDestroy(graph));
  }
  ASSERT_CU(cuStreamDestroy(capturing));
  ASSERT_CU(allocate_block(9, pointer)) << "no capture: the pool pins again";
  EXPECT_EQ(tier_of(pointer), Tier::kHost) << tier_name(tier_of(pointer));
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

// A host limit below one block: neither tier has room, every spill is a clean
// CUDA_ERROR_OUT_OF_MEMORY, and nothing on the device is lost.
TEST_F(Limits, NoHostRoomIsOutOfMemory) {
  ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
  for (int attempt = 0; attempt < 2; ++attempt) {
    CUdeviceptr pointer = 0;
    EXPECT_EQ(allocate_block(7, pointer), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(pointer, 0u);
    EXPECT_EQ(free_bytes(), expected_free(device_count_ * kBlock));
  }
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

// With the host limit a percent of MemAvailable (CMakeLists.txt sets 50%), pinned memory also
// stays under RLIMIT_MEMLOCK: lowered here to 8 MiB before the shim starts (at the first driver
// call), below the pool's 64 MiB step, host spills are a clean CUDA_ERROR_OUT_OF_MEMORY whose
// log line names the limit.
class MemlockLimit : public Limits {
 protected:
  void SetUp() override {
    rlimit limit{};
    ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
    limit.rlim_cur = 8 * kMiB;
    if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < limit.rlim_cur)
      limit.rlim_cur = limit.rlim_max;
    ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &limit), 0);
    Limits::SetUp();
  }
};

// Spills up to RLIMIT_MEMLOCK are pinned, in steps no larger than it leaves (Note [RLIMIT_MEMLOCK
// and the host limit]); the one past it is a clean CUDA_ERROR_OUT_OF_MEMORY.
TEST_F(MemlockLimit, PinningPastRlimitMemlockIsOutOfMemory) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  ASSERT_NO_FATAL_FAILURE(fill_device_with_patterns());
  CUdeviceptr pointer = 0;
  const uint64_t fitting = limit.rlim_cur / kBlock;
  for (uint64_t spill = 0; spill < fitting; ++spill) {
    ASSERT_CU(allocate_block(static_cast<uint32_t>(20 + spill), pointer));
    EXPECT_EQ(tier_of(pointer), Tier::kHost) << tier_name(tier_of(pointer));
  }
  EXPECT_EQ(allocate_block(7, pointer), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(pointer, 0u);
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

// SIMCUDA_FAIL=cuMemAlloc_v2@2=CUDA_ERROR_OUT_OF_MEMORY,cuMemAlloc_v2@3=CUDA_ERROR_INVALID_VALUE:
// under the budget, the driver's own OUT_OF_MEMORY spills the allocation (another process may
// hold the memory); any other driver error is the program's to see.
TEST_F(Limits, DriverErrorsUnderTheBudget) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(allocate_block(1, pointer));
  EXPECT_EQ(tier_of(pointer), Tier::kDevice);
  ASSERT_CU(allocate_block(2, pointer));
  EXPECT_EQ(tier_of(pointer), spill::expected_tier()) << tier_name(tier_of(pointer));
  EXPECT_EQ(allocate_block(3, pointer), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(allocate_block(4, pointer));
  EXPECT_EQ(tier_of(pointer), Tier::kDevice);
  EXPECT_EQ(free_bytes(), expected_free(2 * kBlock)) << "the spilled block counts as device";
  ASSERT_NO_FATAL_FAILURE(expect_all_intact());
}

}  // namespace
