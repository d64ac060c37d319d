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

  // Oversubscribes the device again, writes and checks every block, and frees them: what a job
  // does after the reset.
  void spill_again() {
    std::vector<CUdeviceptr> after;
    oversubscribe(after);
    write_and_check(after);
    free_all(after);
  }

  // The reset takes the fixture's stream and module with it: the module is loaded again, as a
  // program would (cudart does).
  void reset() {
    ASSERT_CU(cuDevicePrimaryCtxReset(device_));
    begin_again();
  }

  // The program lets go of its only reference to the primary context (the fixture's).
  void release_and_retain() {
    ASSERT_NO_FATAL_FAILURE(spill::release_and_retain_primary(device_, &context_));
    begin_again();
  }

  void begin_again() {
    stream_ = nullptr;
    ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));
  }

  // What a job finds after its device was reset: the budget whole, the old blocks gone, and
  // spilling as before, twice.
  void check_a_fresh_start(const std::vector<CUdeviceptr>& before) {
    EXPECT_EQ(free_bytes(), expected_free(0)) << "the reset freed every block the budget held";
    for (const CUdeviceptr pointer : before)
      EXPECT_EQ(cuMemFree(pointer), CUDA_ERROR_INVALID_VALUE);
    for (int round = 0; round < 2; ++round) {
      spill_again();
      EXPECT_EQ(free_bytes(), expected_free(0));
    }
  }
};

TEST_F(DeviceReset, TheBudgetAndTheSpillTiersStartAgainAfterIt) {
  std::vector<CUdeviceptr> before;
  oversubscribe(before);
  write_and_check(before);
  reset();
  check_a_fresh_start(before);
}

// The release of the program's last reference resets the context as cuDevicePrimaryCtxReset does
// (Note [The last release of a primary context] in shim/hooks/device_reset.h): the shim's books
// forget what went, and its own references (the pool's, in host mode) do not keep the program's
// memory alive past it.
TEST_F(DeviceReset, TheProgramsLastReleaseResetsTheContextUnderTheShim) {
  std::vector<CUdeviceptr> before;
  oversubscribe(before);
  write_and_check(before);
  release_and_retain();
  check_a_fresh_start(before);
}

// Note [A created context's end] in shim/hooks/device_reset.h: cuCtxDestroy of a context the
// program created frees what was allocated in it, and the budget has its room back (it went on
// charging for two blocks before).
TEST_F(DeviceReset, ACreatedContextTakesItsMemoryWithItWhenDestroyed) {
  const size_t free_before = free_bytes();
  CUcontext created = nullptr;
  ASSERT_CU(cuCtxCreate(&created, nullptr, 0, device_));
  std::vector<CUdeviceptr> blocks(2);
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAlloc(&block, kBlock));
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kBlock, 0));
  EXPECT_EQ(free_bytes(), free_before - 2 * kBlock);
  ASSERT_CU(cuCtxDestroy(created));  // the primary context is current again
  EXPECT_EQ(free_bytes(), free_before) << "the destroyed context's memory is still charged";
  for (const CUdeviceptr block : blocks) EXPECT_EQ(cuMemFree(block), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
  spill_again();
  EXPECT_EQ(free_bytes(), free_before);
}

// A release that leaves the program a reference resets nothing: its blocks stay, with their bytes.
TEST_F(DeviceReset, AReleaseThatLeavesAReferenceKeepsEverything) {
  std::vector<CUdeviceptr> before;
  oversubscribe(before);
  write_and_check(before);
  const size_t free_before = free_bytes();
  CUcontext second = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&second, device_));
  ASSERT_CU(cuDevicePrimaryCtxRelease(device_));
  EXPECT_EQ(free_bytes(), free_before);
  std::vector<uint32_t> scratch;
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(first_mismatch(before[i], kWords, [&](size_t) { return i + 11; }, scratch), kWords)
        << "block " << i;
  free_all(before);
}

// A capture in progress ends with the context: the spills after the reset, which pin host memory
// or make managed memory (both of which a capture forbids), are not held off by it.
TEST_F(DeviceReset, ACaptureInProgressEndsWithIt) {
  CUstream capturing = nullptr;
  ASSERT_CU(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  reset();
  spill_again();
}

// Frees queued in stream order just before the reset are made before it, while their memory
// exists: made after it, they would fail on memory already gone, and the host limit (two blocks
// here: CMakeLists.txt) would stay charged for them, refusing the spills after the reset.
TEST_F(DeviceReset, FreesQueuedInStreamOrderAreMadeFirst) {
  std::vector<CUdeviceptr> before;
  oversubscribe(before);
  write_and_check(before);
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (const CUdeviceptr block : before) ASSERT_CU(cuMemFreeAsync(block, stream));
  reset();
  spill_again();
}

// The pool pins in the primary context of the first device that spills. Resetting that device
// takes the memory of blocks spilled for another one, which the program still holds: their
// contents are gone, and no new spill may share their addresses (the shim fences them off with
// an inaccessible mapping; whether the fence was still possible is up to the other threads' mmaps
// between the driver's unmap and the fence, so this checks the spills, the fence's purpose); the
// program may still free them (two devices here: CMakeLists.txt).
TEST_F(DeviceReset, ABlockSpilledForAnotherDeviceNeverSharesItsAddress) {
  std::vector<CUdeviceptr> first;
  oversubscribe(first);  // the pool now pins in device 0's primary context
  // Device 0's spills go back, so that device 1's take the pool's first addresses, which device
  // 0's new spills would take again after the reset.
  for (const CUdeviceptr block : first) {
    if (tier_of(block) != Tier::kDevice) {
      ASSERT_CU(cuMemFree(block));
    }
  }
  CUdevice other_device = 0;
  CUcontext other = nullptr;
  ASSERT_CU(cuDeviceGet(&other_device, 1));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&other, other_device));
  ASSERT_CU(cuCtxSetCurrent(other));
  std::vector<CUdeviceptr> others;
  for (int i = 0; i < 10; ++i) {
    CUdeviceptr block = 0;
    ASSERT_CU(cuMemAlloc(&block, kBlock));
    others.push_back(block);
  }
  std::vector<CUdeviceptr> others_spilled;
  for (const CUdeviceptr block : others) {
    if (tier_of(block) == Tier::kHost) others_spilled.push_back(block);
  }
  ASSERT_FALSE(others_spilled.empty());
  ASSERT_CU(cuCtxSetCurrent(context_));
  reset();
  std::vector<CUdeviceptr> after;
  oversubscribe(after);
  for (const CUdeviceptr block : after) {
    for (const CUdeviceptr old : others_spilled) {
      EXPECT_FALSE(block < old + kBlock && old < block + kBlock)
          << "a new spill at " << block << " shares the address of device 1's block " << old;
    }
  }
  write_and_check(after);
  free_all(after);
  // Device 1's blocks are still the program's to free, the lost ones too.
  ASSERT_CU(cuCtxSetCurrent(other));
  for (const CUdeviceptr block : others) EXPECT_CU(cuMemFree(block));
  ASSERT_CU(cuCtxSetCurrent(context_));
  EXPECT_CU(cuDevicePrimaryCtxRelease(other_device));
}

// The usual place: a reset just before the program returns from main, with spilled blocks live.
TEST_F(DeviceReset, ResettingWithSpilledBlocksLiveEndsTheProcessCleanly) {
  std::vector<CUdeviceptr> blocks;
  oversubscribe(blocks);
  write_and_check(blocks);
  reset();
}

}  // namespace
