// A program that resets its device (cudaDeviceReset, cuDevicePrimaryCtxReset) and goes on: the
// driver frees everything allocated in the primary context, spilled blocks included, so the
// budget must have its room back, a spill after the reset must land in memory that exists, and
// every byte written after it must read back (Note [Resetting the device] in
// shim/hooks/device_reset.h). Run in each spill mode (CMakeLists.txt).
#include "spill_support.h"

namespace {

using spill::kBlock;
using spill::Tier;
using spill::tier_of;

constexpr size_t kWords = kBlock / sizeof(uint32_t);

class DeviceReset : public spill::SpillTest {
 protected:
  // Fills the device and spills two blocks past it (or, with spilling off, is refused the first).
  void oversubscribe(std::vector<CUdeviceptr>& blocks) {
    fill_device(blocks);
    for (int i = 0; i < 2; ++i) {
      CUdeviceptr pointer = 0;
      const CUresult result = cuMemAlloc(&pointer, kBlock);
      if (spill::spilling_off()) {
        ASSERT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
        return;
      }
      ASSERT_CU(result);
      ASSERT_EQ(tier_of(pointer), spill::expected_tier());
      blocks.push_back(pointer);
    }
  }

  // Writes block i with kernels on a fresh stream and reads every word back.
  void write_and_check(const std::vector<CUdeviceptr>& blocks) {
    CUstream stream = nullptr;
    ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < blocks.size(); ++i)
      ASSERT_CU(fill(blocks[i], static_cast<uint32_t>(i + 11), kWords, stream));
    ASSERT_CU(cuStreamSynchronize(stream));
    ASSERT_CU(cuStreamDestroy(stream));
    std::vector<uint32_t> scratch;
    for (size_t i = 0; i < blocks.size(); ++i)
      ASSERT_EQ(first_mismatch(blocks[i], kWords, [&](size_t) { return i + 11; }, scratch),
                kWords)
          << "block " << i;
  }

  // The reset takes the fixture's stream and module with it: the module is loaded again, as a
  // program would (cudart does).
  void reset() {
    ASSERT_CU(cuDevicePrimaryCtxReset(device_));
    stream_ = nullptr;
    ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));
  }
};

TEST_F(DeviceReset, TheBudgetAndTheSpillTiersStartAgainAfterIt) {
  std::vector<CUdeviceptr> before;
  oversubscribe(before);
  write_and_check(before);
  reset();
  EXPECT_EQ(free_bytes(), expected_free(0)) << "the reset freed every block the budget held";
  for (const CUdeviceptr pointer : before) EXPECT_EQ(cuMemFree(pointer), CUDA_ERROR_INVALID_VALUE);

  for (int round = 0; round < 2; ++round) {
    std::vector<CUdeviceptr> after;
    oversubscribe(after);
    write_and_check(after);
    free_all(after);
    EXPECT_EQ(free_bytes(), expected_free(0));
  }
}

// The usual place: a reset just before the program returns from main, with spilled blocks live.
TEST_F(DeviceReset, ResettingWithSpilledBlocksLiveEndsTheProcessCleanly) {
  std::vector<CUdeviceptr> blocks;
  oversubscribe(blocks);
  write_and_check(blocks);
  reset();
}

}  // namespace
