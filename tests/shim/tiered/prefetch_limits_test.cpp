// Where unified memory cannot follow the prefetch mover ([tiered] mover = "prefetch"; README,
// "The prefetch mover"): a driver-API program under the shim on simcuda, one case per limit,
// each run by its own ctest with the environment it needs (tests/shim/tiered/CMakeLists.txt:
// 64 MiB of VRAM and a 16 MiB budget a device, 4 MiB blocks). Every byte is checked; the log
// lines each limit is said with are the ctests' to check.
#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "tiered_fixture.h"

namespace {

using spill::behind_the_shim;
using spill::kMiB;
using tiered_test::kBlock;
using tiered_test::TieredTest;

class PrefetchLimitsTest : public TieredTest {
 protected:
  void SetUp() override {
    TieredTest::SetUp();
    if (HasFatalFailure()) return;
    CUdeviceptr probe = 0;
    ASSERT_CU(cuMemAlloc(&probe, kBlock));
    int managed = 0;
    ASSERT_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, probe));
    ASSERT_CU(cuMemFree(probe));
    ASSERT_EQ(managed, 1) << "run with VRAMSPILL_TIERED_MOVER=prefetch";
  }

  // Blocks worth twice the budget, block i filled with i on `stream`: the first ones end on
  // the host, the last ones on the device.
  std::vector<CUdeviceptr> twice_the_budget(CUstream stream) {
    std::vector<CUdeviceptr> blocks(8);
    for (size_t index = 0; index < blocks.size(); ++index) {
      EXPECT_CU(cuMemAlloc(&blocks[index], kBlock));
      EXPECT_CU(fill(blocks[index], static_cast<uint32_t>(index), stream));
    }
    EXPECT_CU(cuStreamSynchronize(stream));
    return blocks;
  }

  static int last_prefetch_location(CUdeviceptr block) {
    int location = CU_DEVICE_INVALID;
    EXPECT_CU(cuMemRangeGetAttribute(&location, sizeof(location),
                                     CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, block, kBlock));
    return location;
  }
};

// CUDA IPC cannot share managed memory, and the driver refuses it: so does the shim, with the
// driver's error, however often it is asked (the log says it once).
TEST_F(PrefetchLimitsTest, IpcRefusesABlockWithTheDriversError) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, kBlock));
  CUipcMemHandle handle;
  EXPECT_EQ(cuIpcGetMemHandle(&handle, block), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuIpcGetMemHandle(&handle, block), CUDA_ERROR_INVALID_VALUE);
  // What the driver itself answers for the same memory.
  const auto driver_ipc = behind_the_shim<decltype(&cuIpcGetMemHandle)>("cuIpcGetMemHandle");
  ASSERT_NE(driver_ipc, nullptr);
  EXPECT_EQ(driver_ipc(&handle, block), CUDA_ERROR_INVALID_VALUE);
  fill_check_and_free(block, 7);
}

// Note [Who may reach a managed block] in shim/tiers/driver_prefetch_ops.h: a kernel of device 1
// (with peer access to device 0) writes a block device 0 has brought in. The bytes are exact, the
// block's pages stay on device 0, where device 0's budget counts them, and device 1's VRAM takes
// none of them (the driver's free memory of each device, asked past the shim, does not change).
TEST_F(PrefetchLimitsTest, APeerKernelReachesADeviceBlockWhereItIs) {
  int devices = 0;
  ASSERT_CU(cuDeviceGetCount(&devices));
  ASSERT_GE(devices, 2) << "run with SIMCUDA_DEVICES=2";
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, kBlock));
  ASSERT_CU(fill(block, 11, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  ASSERT_EQ(last_prefetch_location(block), 0) << "the block was not brought in to device 0";
  const size_t device0_free = driver_free();

  CUdevice peer_device = 0;
  CUcontext peer = nullptr;
  ASSERT_CU(cuDeviceGet(&peer_device, 1));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&peer, peer_device));
  ASSERT_CU(cuCtxSetCurrent(peer));
  ASSERT_CU(cuCtxEnablePeerAccess(context_, 0));
  const size_t device1_free = driver_free();
  CUstream peer_stream = nullptr;
  ASSERT_CU(cuStreamCreate(&peer_stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(fill(block, 12, peer_stream));
  ASSERT_CU(cuStreamSynchronize(peer_stream));
  EXPECT_EQ(driver_free(), device1_free) << "device 1 took the block's pages";
  ASSERT_CU(cuStreamDestroy(peer_stream));
  ASSERT_CU(cuCtxDisablePeerAccess(context_));
  ASSERT_CU(cuCtxSetCurrent(context_));
  ASSERT_CU(cuDevicePrimaryCtxRelease(peer_device));

  EXPECT_EQ(driver_free(), device0_free) << "the block's pages left device 0";
  EXPECT_EQ(last_prefetch_location(block), 0);
  expect_block(block, 12);
  ASSERT_CU(cuMemFree(block));
}

// Note [A capture begun while a move is queued] in shim/tiers/driver_prefetch_ops.h. A capture
// the shim has not counted (begun here behind its back) lets blocks move while a stream
// captures: the launch captured on it promotes a block on the host, and a launch on another
// stream evicts blocks last used on the capturing stream. Neither move may record on or wait
// from the capturing stream: the capture ends valid, its graph replays exact bytes, and so does
// the other stream's launch. The capture is relaxed: in the other modes the moves' own queries
// and waits beside it would break it as well, which only counting it prevents.
TEST_F(PrefetchLimitsTest, AStreamBeingCapturedIsLeftOutOfMoves) {
  const auto begin_capture =
      behind_the_shim<CUresult (*)(CUstream, CUstreamCaptureMode)>("cuStreamBeginCapture_v2");
  ASSERT_NE(begin_capture, nullptr);
  CUstream capturing = streams_[1];
  std::vector<CUdeviceptr> blocks = twice_the_budget(capturing);
  ASSERT_EQ(last_prefetch_location(blocks[0]), CU_DEVICE_CPU) << "block 0 is not on the host";

  ASSERT_CU(begin_capture(capturing, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(fill(blocks[0], 100, capturing));
  ASSERT_CU(fill(blocks[1], 101, streams_[0]));
  // The other stream was not drawn into the capture (through a wait on a move recorded in it):
  // it runs, and the program may wait for it.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  ASSERT_CU(cuStreamIsCapturing(streams_[0], &status));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  ASSERT_NO_FATAL_FAILURE(replay_capture(capturing));

  expect_block(blocks[0], 100);
  expect_block(blocks[1], 101);
  for (size_t index = 2; index < blocks.size(); ++index)
    expect_block(blocks[index], static_cast<uint32_t>(index));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// Note [Stream-ordered frees on the shim's thread] in shim/tiers/stream_ordered_frees.h: a block
// freed in stream order is freed by the shim's own thread, whose cuMemFree would break another
// thread's capture in global mode. It waits for the capture to end: the capture ends valid, and
// then the block goes and its budget comes back.
TEST_F(PrefetchLimitsTest, AFreeInStreamOrderWaitsForACaptureToEnd) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, kBlock));
  ASSERT_CU(fill(block, 5, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  size_t free_before = 0;
  size_t total = 0;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUstream capturing = streams_[1];
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  // Long enough for the shim's thread to have the block: its stream has nothing left to run.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(capturing, &graph)) << "the free broke the capture";
  ASSERT_CU(cuGraphDestroy(graph));
  size_t free_after = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (free_after < free_before + kBlock && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_CU(cuMemGetInfo(&free_after, &total));
  }
  EXPECT_EQ(free_after, free_before + kBlock) << "the block was not freed after the capture";
}

// Note [No moves during a capture]: a launch captured on a block moves nothing, and the graph,
// replayed after the block has been evicted and brought back, still writes and reads it exactly.
TEST_F(PrefetchLimitsTest, AGraphReplayedAfterMovesKeepsEveryByte) {
  std::vector<CUdeviceptr> blocks = twice_the_budget(streams_[0]);
  CUstream capturing = streams_[1];
  const CUdeviceptr target = blocks.back();
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(copy(target, blocks[0], capturing));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(capturing, &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  // Every block touched again: the target and the source both move.
  for (size_t index = 0; index < blocks.size(); ++index)
    ASSERT_CU(fill(blocks[index], static_cast<uint32_t>(index) + 1000, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  // The replay names the blocks its node touches, as a launch does: the source, on the host by
  // now, is brought in for it.
  EXPECT_EQ(last_prefetch_location(blocks[0]), CU_DEVICE_CPU);
  ASSERT_CU(cuGraphLaunch(exec, capturing));
  ASSERT_CU(cuStreamSynchronize(capturing));
  EXPECT_EQ(last_prefetch_location(blocks[0]), 0);
  expect_block(target, 1000);  // block 0's value, copied by the replay
  for (size_t index = 0; index + 1 < blocks.size(); ++index)
    expect_block(blocks[index], static_cast<uint32_t>(index) + 1000);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// Note [Integrated devices] in shim/hooks/devices.h: no mover tiers an integrated device's
// memory, the prefetch mover included. The budget holds and what does not fit is refused with
// the driver's CUDA_ERROR_OUT_OF_MEMORY; what was allocated keeps its bytes.
TEST_F(TieredTest, AnIntegratedDeviceHoldsItsBudget) {
  int integrated = 0;
  ASSERT_CU(cuDeviceGetAttribute(&integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED, device_));
  ASSERT_EQ(integrated, 1) << "run with SIMCUDA_ATTRS=INTEGRATED=1";
  std::vector<CUdeviceptr> blocks;
  CUresult refused = CUDA_SUCCESS;
  for (int attempt = 0; attempt < 8 && refused == CUDA_SUCCESS; ++attempt) {
    CUdeviceptr block = 0;
    refused = cuMemAlloc(&block, kBlock);
    if (refused == CUDA_SUCCESS) blocks.push_back(block);
  }
  EXPECT_EQ(refused, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_LE(blocks.size() * kBlock, 16 * kMiB) << "more than the budget was allocated";
  ASSERT_FALSE(blocks.empty());
  int managed = 1;
  ASSERT_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, blocks[0]));
  EXPECT_EQ(managed, 0) << "an integrated device's block was made managed memory";
  for (size_t index = 0; index < blocks.size(); ++index)
    ASSERT_CU(fill(blocks[index], static_cast<uint32_t>(index), streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  for (size_t index = 0; index < blocks.size(); ++index)
    expect_block(blocks[index], static_cast<uint32_t>(index));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

}  // namespace
