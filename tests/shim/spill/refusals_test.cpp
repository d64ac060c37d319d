// What must not spill (Note [What spills] in placement/spill_placement.h):
// stream-ordered allocations made while their stream is captured, allocations below
// [spill] min_size, and spilled memory whose IPC handle is asked for. CMakeLists.txt checks the
// log lines that say why (check_output.py); these tests check the results.
#include <cstdio>

#include "spill_support.h"

namespace {

using spill::kBlock;
using spill::kMiB;
using spill::Tier;
using spill::tier_of;

class Refusals : public spill::SpillTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SpillTest::SetUp());
    ASSERT_FALSE(spill::spilling_off());
    ASSERT_NO_FATAL_FAILURE(fill_device(device_blocks_));
    held_ = device_blocks_.size() * kBlock;
  }
  void TearDown() override {
    free_all(device_blocks_);
    EXPECT_EQ(free_bytes(), expected_free(0));
    SpillTest::TearDown();
  }

  std::vector<CUdeviceptr> device_blocks_;
  size_t held_ = 0;
};

// A stream-ordered request on a capturing stream makes an allocation node of the graph, whose
// memory the driver reserves for the graph, not the pool (Note [A captured request is the
// graph's] in shim/hooks/pool_allocation.h). Over the budget it is not spilled (a graph would
// bake in the spilled address, and its own free would never reach the spill tier) and not
// refused (the capture, PyTorch's CUDA graph, would fail for memory the budget does not count):
// it goes to the driver, and the capture stays valid.
TEST_F(Refusals, CapturedStreamOrderedAllocationIsTheGraphsNotSpilled) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUdeviceptr pointer = 0;
  EXPECT_CU(cuMemAllocAsync(&pointer, kBlock, stream_));
  EXPECT_NE(pointer, 0u);
  EXPECT_CU(cuMemFreeAsync(pointer, stream_));
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&pool, device_));
  pointer = 0;
  EXPECT_CU(cuMemAllocFromPoolAsync(&pointer, kBlock, pool, stream_));
  EXPECT_NE(pointer, 0u);
  EXPECT_CU(cuMemFreeAsync(pointer, stream_));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_CU(cuStreamIsCapturing(stream_, &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE) << "the refusal invalidated the capture";
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  if (graph != nullptr) {
    EXPECT_CU(cuGraphDestroy(graph));
  }
  EXPECT_EQ(free_bytes(), expected_free(held_));

  // The same request outside capture spills.
  ASSERT_CU(cuMemAllocAsync(&pointer, kBlock, stream_));
  EXPECT_EQ(tier_of(pointer), spill::expected_tier());
  EXPECT_CU(cuMemFreeAsync(pointer, stream_));
  EXPECT_CU(cuStreamSynchronize(stream_));
}

// A spilled block's stream-ordered free on a capturing stream cannot be recorded into the
// graph: it is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, what simcuda answers for device
// memory), without invalidating the capture, and the block stays allocated (its bytes intact, a
// later free works).
TEST_F(Refusals, FreeAsyncOfSpilledBlockWhileCapturingKeepsIt) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc(&pointer, kBlock));
  ASSERT_NE(tier_of(pointer), Tier::kDevice);
  const std::vector<uint32_t> host(kBlock / 4, 0x31415926u);
  ASSERT_CU(cuMemcpyHtoD(pointer, host.data(), kBlock));

  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  const CUresult freed = cuMemFreeAsync(pointer, stream_);
  CUgraph graph = nullptr;
  const CUresult ended = cuStreamEndCapture(stream_, &graph);
  if (graph != nullptr) {
    EXPECT_CU(cuGraphDestroy(graph));
  }
  EXPECT_EQ(freed, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(ended, CUDA_SUCCESS) << "the refused free invalidated the program's capture";
  if (freed != CUDA_SUCCESS) {
    std::vector<uint32_t> back(kBlock / 4);
    ASSERT_CU(cuMemcpyDtoH(back.data(), pointer, kBlock));
    EXPECT_EQ(back, host);
    EXPECT_CU(cuMemFree(pointer));
  }
}

// CUDA IPC cannot share host memory: cuIpcGetMemHandle of a spilled block is refused with
// CUDA_ERROR_INVALID_VALUE (and a log line naming the block, which CMakeLists.txt matches
// against the address printed here); a block on the device still gets its handle.
TEST_F(Refusals, IpcHandleOfSpilledAllocationIsRefused) {
  CUipcMemHandle handle{};
  EXPECT_CU(cuIpcGetMemHandle(&handle, device_blocks_.front()));

  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc(&pointer, kBlock));
  ASSERT_NE(tier_of(pointer), Tier::kDevice);
  std::printf("spilled block at %#llx\n", static_cast<unsigned long long>(pointer));
  std::fflush(stdout);
  EXPECT_EQ(cuIpcGetMemHandle(&handle, pointer), CUDA_ERROR_INVALID_VALUE);
  // The refusal changes nothing: the block is still there and still spilled.
  EXPECT_NE(tier_of(pointer), Tier::kDevice);
  EXPECT_CU(cuMemFree(pointer));
}

// [spill] min_size (CMakeLists.txt sets 8 MiB): smaller allocations over the budget fail with
// CUDA_ERROR_OUT_OF_MEMORY by every linear route; one of min_size spills.
TEST_F(Refusals, AllocationsBelowMinSizeAreNotSpilled) {
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc(&pointer, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc(&pointer, 8 * kMiB - 4096), CUDA_ERROR_OUT_OF_MEMORY);
  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch(&pointer, &pitch, 1024, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&pointer, kBlock, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocManaged(&pointer, kBlock, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(pointer, 0u);
  EXPECT_EQ(free_bytes(), expected_free(held_));

  ASSERT_CU(cuMemAlloc(&pointer, 8 * kMiB));
  EXPECT_EQ(tier_of(pointer), spill::expected_tier());
  EXPECT_CU(cuMemFree(pointer));
}

}  // namespace

namespace {

// The program's own page-locked memory counts against the host limit (512 MiB here): while it
// holds nearly all of it, a spill finds no room; once it frees it, the same spill goes through.
TEST_F(Refusals, ProgramPinnedMemoryLeavesLessRoomToSpill) {
  constexpr size_t kPinned = 510 * kMiB;
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, kPinned, CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr refused = 0;
  EXPECT_EQ(cuMemAlloc(&refused, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuMemFreeHost(pinned));
  CUdeviceptr spilled = 0;
  ASSERT_CU(cuMemAlloc(&spilled, kBlock));
  EXPECT_NE(tier_of(spilled), Tier::kDevice);
  ASSERT_CU(cuMemFree(spilled));
}

}  // namespace
