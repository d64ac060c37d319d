// Tiered mode end to end: a driver-API program under the shim on simcuda with [spill] mode =
// "tiered" (tests/shim/tiered/CMakeLists.txt sets the environment: 64 MiB of VRAM, a 16 MiB
// budget). The program allocates several times the budget, and its data must come back byte
// for byte however the blocks moved, with simcuda's remap checks (Note [Remap protocol] in
// tools/simcuda) counting no violation: the shim never remapped a granule that queued work
// could touch.
#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tiered_fixture.h"

namespace {

using spill::behind_the_shim;
using spill::kMiB;
using tiered_test::kBlock;
using tiered_test::kStreams;
using tiered_test::kWords;
using tiered_test::TieredTest;

// A block of the workload: its stream, the value every word holds once its stream's work has
// run, and the event after its last piece of work (other streams wait on it before they read
// it, so the program is race-free without ever synchronising the host).
struct Tracked {
  CUdeviceptr base = 0;
  int stream = 0;
  uint32_t value = 0;
  CUevent done = nullptr;
};

// Random allocations, frees (cuMemFree and cuMemFreeAsync), fills, kernel copies and
// cuMemcpyDtoDAsync copies across three streams ordered only by events, over 2 to 4 times the
// budget; then every byte is checked.
TEST_F(TieredTest, EveryByteSurvivesEvictionAndPromotion) {
  std::mt19937 random(20261202);
  std::vector<Tracked> blocks;
  const auto add_block = [&] {
    Tracked block;
    ASSERT_CU(cuMemAlloc(&block.base, kBlock));
    block.stream = static_cast<int>(random() % kStreams);
    block.value = static_cast<uint32_t>(random());
    ASSERT_CU(cuEventCreate(&block.done, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(fill(block.base, block.value, streams_[block.stream]));
    ASSERT_CU(cuEventRecord(block.done, streams_[block.stream]));
    blocks.push_back(block);
  };
  for (int i = 0; i < 8; ++i) add_block();  // 32 MiB: twice the budget
  for (int step = 0; step < 400; ++step) {
    const unsigned action = random() % 10;
    Tracked& target = blocks[random() % blocks.size()];
    CUstream stream = streams_[target.stream];
    if (action < 4) {  // refill
      target.value = static_cast<uint32_t>(random());
      ASSERT_CU(fill(target.base, target.value, stream));
    } else if (action < 8) {  // copy another block into this one
      Tracked& source = blocks[random() % blocks.size()];
      if (&source == &target) continue;
      ASSERT_CU(cuStreamWaitEvent(stream, source.done, 0));
      if (action < 6) {
        ASSERT_CU(copy(target.base, source.base, stream));
      } else {
        ASSERT_CU(cuMemcpyDtoDAsync(target.base, source.base, kBlock, stream));
      }
      target.value = source.value;
      // The source's stream must not overwrite it before this copy has read it.
      ASSERT_CU(cuEventRecord(target.done, stream));
      ASSERT_CU(cuStreamWaitEvent(streams_[source.stream], target.done, 0));
    } else if (action == 8 && blocks.size() > 6) {  // free in stream order or at once
      if (random() % 2 == 0) {
        ASSERT_CU(cuMemFreeAsync(target.base, stream));
      } else {
        ASSERT_CU(cuMemFree(target.base));
      }
      ASSERT_CU(cuEventDestroy(target.done));
      target = blocks.back();
      blocks.pop_back();
      continue;
    } else if (blocks.size() < 16) {  // up to 64 MiB: four times the budget
      add_block();
      continue;
    }
    ASSERT_CU(cuEventRecord(target.done, stream));
  }
  ASSERT_CU(cuCtxSynchronize());
  for (const Tracked& block : blocks) expect_block(block.base, block.value);
  for (const Tracked& block : blocks) {
    EXPECT_CU(cuMemFree(block.base));
    EXPECT_CU(cuEventDestroy(block.done));
  }
}

// A stream destroyed with work still queued on blocks that then move: its work runs, and the
// move must wait for it although the stream is gone (Note [Stream slots] in
// shim/core/stream_slots.h: with the tracked window its slot retires and the move waits for the
// whole device; the test's ctest entry rejects the log line of a failed wait on the stream).
// A loop over 1.5 times the budget that learned locks on, and a block it never uses whose room
// learned gives to the loop's next blocks ahead of their launches: with the tracked window those
// are staged (Note [Staged promotions] in shim/tiers/granule_arena.h), copied while the streams
// run, and remapped when a launch touches them. Even blocks are written every round, odd ones
// read and written back by a kernel; every byte is checked at the end.
TEST_F(TieredTest, StagedPromotionsKeepEveryByte) {
  constexpr int kLoop = 6;
  constexpr int kRounds = 8;
  CUdeviceptr blocks[kLoop] = {};
  for (int i = 0; i < kLoop; ++i) {
    ASSERT_CU(cuMemAlloc(&blocks[i], kBlock));
    ASSERT_CU(fill(blocks[i], 0x1000u + static_cast<uint32_t>(i), streams_[i % kStreams]));
  }
  CUdeviceptr cold = 0;
  for (int round = 0; round < kRounds; ++round) {
    if (round == 3) {
      ASSERT_CU(cuMemAlloc(&cold, kBlock));  // learned is locked by now
    }
    for (int i = 0; i < kLoop; ++i) {
      CUstream stream = streams_[i % kStreams];
      if (i % 2 == 0) {
        ASSERT_CU(fill(blocks[i], static_cast<uint32_t>(round * 16 + i), stream));
      } else {
        ASSERT_CU(copy(blocks[i], blocks[i], stream));
      }
    }
  }
  ASSERT_CU(cuCtxSynchronize());  // the streams do not block: the check reads on the legacy one
  for (int i = 0; i < kLoop; ++i) {
    expect_block(blocks[i], i % 2 == 0 ? static_cast<uint32_t>((kRounds - 1) * 16 + i)
                                       : 0x1000u + static_cast<uint32_t>(i));
    ASSERT_CU(cuMemFree(blocks[i]));
  }
  ASSERT_CU(cuMemFree(cold));
}

TEST_F(TieredTest, AStreamDestroyedWithWorkQueuedIsWaitedFor) {
  CUstream doomed = nullptr;
  ASSERT_CU(cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING));
  std::vector<CUdeviceptr> first(4);  // the whole 16 MiB budget
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_CU(cuMemAlloc(&first[i], kBlock));
    for (uint32_t round = 0; round <= 20; ++round)
      ASSERT_CU(fill(first[i], static_cast<uint32_t>(100 * i + round), doomed));
  }
  ASSERT_CU(cuStreamDestroy(doomed));  // returns at once; the fills still run
  std::vector<CUdeviceptr> second(4);  // evicts the first blocks
  for (size_t i = 0; i < second.size(); ++i) {
    ASSERT_CU(cuMemAlloc(&second[i], kBlock));
    ASSERT_CU(fill(second[i], static_cast<uint32_t>(1000 + i), streams_[0]));
  }
  ASSERT_CU(cuCtxSynchronize());
  for (size_t i = 0; i < first.size(); ++i) expect_block(first[i], static_cast<uint32_t>(100 * i + 20));
  for (size_t i = 0; i < second.size(); ++i) expect_block(second[i], static_cast<uint32_t>(1000 + i));
  for (const CUdeviceptr block : first) EXPECT_CU(cuMemFree(block));
  for (const CUdeviceptr block : second) EXPECT_CU(cuMemFree(block));
}

// A launch whose arguments the shim cannot read (tests/shim/tiered/CMakeLists.txt has simcuda
// refuse the first layout queries, so the first launch is such a launch) may touch any block
// (Note [Kernels launched as functions] in shim/core/launch_arguments.h). It is queued behind a
// host function that holds its stream, and then its block, the least recently used, must be
// evicted to make room: the eviction has to wait for the launch to run. Were the launch recorded
// as touching nothing, the tracked window would remap the block under it, which simcuda turns
// into an abort (SIMCUDA_REMAP_VIOLATIONS=abort), and the safe window would lose nothing only
// because it synchronises the whole device.
TEST_F(TieredTest, AnUnreadableLaunchKeepsItsBlockUntilItRuns) {
  std::vector<CUdeviceptr> blocks(4);  // the whole 16 MiB budget; the first is used least recently
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_CU(cuMemAlloc(&blocks[i], kBlock));
    ASSERT_CU(cuMemsetD32(blocks[i], static_cast<unsigned>(i), kWords));  // no launch yet
  }
  // A memset of device memory may return before it ran, on the legacy stream, which streams_[0]
  // (non-blocking) does not wait for: the fill below would race with it.
  ASSERT_CU(cuCtxSynchronize());
  std::atomic<bool> released{false};
  const CUhostFn hold = [](void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
  };
  ASSERT_CU(cuLaunchHostFunc(streams_[0], hold, &released));
  ASSERT_CU(fill(blocks[0], 0xfeed, streams_[0]));  // unreadable, and queued
  std::thread releaser([&released] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    released.store(true);
  });
  CUdeviceptr newcomer = 0;
  const CUresult allocated = cuMemAlloc(&newcomer, kBlock);  // evicts blocks[0]
  releaser.join();
  ASSERT_CU(allocated);
  ASSERT_CU(cuCtxSynchronize());
  expect_block(blocks[0], 0xfeed);
  for (size_t i = 1; i < blocks.size(); ++i) expect_block(blocks[i], static_cast<uint32_t>(i));
  for (const CUdeviceptr block : blocks) EXPECT_CU(cuMemFree(block));
  EXPECT_CU(cuMemFree(newcomer));
}

// A stream memory operation names its address as a copy does. Each test queues one on a block,
// behind a host function that holds its stream, and then allocates a block, which evicts one.
class StreamValueTest : public TieredTest {
 protected:
  // The whole 16 MiB budget in four blocks, each filled with its number (from 1); the first is
  // used least recently.
  void fill_the_budget() {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      ASSERT_CU(cuMemAlloc(&blocks_[i], kBlock));
      ASSERT_CU(fill(blocks_[i], static_cast<uint32_t>(i + 1), streams_[0]));
    }
    ASSERT_CU(cuCtxSynchronize());
  }

  // Holds `stream` with a host function for 200 ms, queues `operation` behind it, and allocates
  // one block more meanwhile; then checks that the first block holds 0xfeed in its second word
  // and every block what it should, and frees them.
  template <typename Operation>
  void allocate_behind_a_held(CUstream stream, Operation operation) {
    std::atomic<bool> released{false};
    const CUhostFn hold = [](void* flag) {
      while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
    };
    ASSERT_CU(cuLaunchHostFunc(stream, hold, &released));
    ASSERT_CU(operation());
    std::thread releaser([&released] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      released.store(true);
    });
    CUdeviceptr newcomer = 0;
    const CUresult allocated = cuMemAlloc(&newcomer, kBlock);  // evicts a block
    releaser.join();
    ASSERT_CU(allocated);
    ASSERT_CU(cuCtxSynchronize());
    uint32_t words[3] = {};
    ASSERT_CU(cuMemcpyDtoH(words, blocks_[0], sizeof words));
    EXPECT_EQ(words[0], 1u);
    EXPECT_EQ(words[1], 0xfeedu);
    EXPECT_EQ(words[2], 1u);
    for (size_t i = 1; i < blocks_.size(); ++i)
      expect_block(blocks_[i], static_cast<uint32_t>(i + 1));
    for (const CUdeviceptr block : blocks_) EXPECT_CU(cuMemFree(block));
    EXPECT_CU(cuMemFree(newcomer));
  }

  std::vector<CUdeviceptr> blocks_ = std::vector<CUdeviceptr>(4);
};

// A value written in stream order (cuStreamWriteValue32) into the least recently used block:
// were the write not recorded, that block would be evicted, and the tracked window would remap
// it under the write (simcuda aborts on that).
TEST_F(StreamValueTest, AValueWrittenInStreamOrderKeepsItsBlockUntilItIsWritten) {
  fill_the_budget();
  allocate_behind_a_held(streams_[0], [&] {
    return cuStreamWriteValue32(streams_[0], blocks_[0] + 4, 0xfeed, 0);
  });
}

// ... and a wait for a value reads it: a cuStreamWaitValue32 on the least recently used block
// makes it used, and keeps it where it is until the wait has run (the value it waits for is there
// already). Were the wait not recorded, that block would be evicted, and remapped under the wait.
TEST_F(StreamValueTest, AValueWaitedForInStreamOrderKeepsItsBlockUntilTheWaitHasRun) {
  fill_the_budget();
  ASSERT_CU(cuStreamWriteValue32(streams_[1], blocks_[0] + 4, 0xfeed, 0));
  ASSERT_CU(cuCtxSynchronize());
  for (size_t i = 1; i < blocks_.size(); ++i)  // the first is the least recently used again
    ASSERT_CU(fill(blocks_[i], static_cast<uint32_t>(i + 1), streams_[0]));
  ASSERT_CU(cuCtxSynchronize());
  // On a stream with no other work, which nothing but the wait would make the move wait for.
  allocate_behind_a_held(streams_[2], [&] {
    return cuStreamWaitValue32(streams_[2], blocks_[0] + 4, 0xfeed, CU_STREAM_WAIT_VALUE_EQ);
  });
}

// Kernels as the CUDA runtime launches them: CUkernel handles from a library, passed to the
// launch calls as CUfunction (Note [Kernels launched as functions] in
// shim/core/launch_arguments.h). The shim must read every one (the summary counts none
// unreadable, tests/shim/tiered/CMakeLists.txt), and the blocks they name come in as for a
// module's functions, every byte intact.
TEST_F(TieredTest, LibraryKernelsAreReadLikeModuleFunctions) {
  CUlibrary library = nullptr;
  ASSERT_CU(cuLibraryLoadData(&library, "simcuda accepts any image", nullptr, nullptr, 0, nullptr,
                              nullptr, 0));
  CUkernel fill_kernel = nullptr;
  CUkernel copy_kernel = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&fill_kernel, library, "vs_fill_u32"));
  ASSERT_CU(cuLibraryGetKernel(&copy_kernel, library, "vs_copy"));
  std::vector<CUdeviceptr> blocks(8);  // twice the budget
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_CU(cuMemAlloc(&blocks[i], kBlock));
    uint32_t value = static_cast<uint32_t>(100 + i);
    uint64_t count = kWords;
    void* params[] = {&blocks[i], &value, &count};
    ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(fill_kernel), 64, 1, 1, 256, 1, 1, 0,
                             streams_[0], params, nullptr));
  }
  // Each block, in turn, copied into the next through cuLaunchKernelEx: each launch brings in
  // two blocks, which the budget's four can always hold.
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    uint64_t bytes = kBlock;
    void* params[] = {&blocks[i + 1], &blocks[i], &bytes};
    CUlaunchConfig config{};
    config.gridDimX = 64;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 256;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = streams_[0];
    ASSERT_CU(cuLaunchKernelEx(&config, reinterpret_cast<CUfunction>(copy_kernel), params,
                               nullptr));
  }
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  for (const CUdeviceptr block : blocks) expect_block(block, 100);
  for (const CUdeviceptr block : blocks) EXPECT_CU(cuMemFree(block));
  EXPECT_CU(cuLibraryUnload(library));
}

// Note [Resetting the device] in shim/hooks/device_reset.h: a reset takes the program's tiered
// blocks with it, moved or not (their frees are then the driver's to refuse, and the exit summary
// counts no block left: CMakeLists.txt), and blocks made after it move both ways and keep every
// byte, on the streams and events the shim makes anew. The program resets the device with
// cuDevicePrimaryCtxReset, or by releasing its only reference to the primary context (Note [The
// last release of a primary context] there), which the movers' own references must not prevent.
class TieredResetTest : public TieredTest {
 public:
  void release_and_retain() { spill::release_and_retain_primary(device_, &context_); }
  void reset_by_the_driver() { ASSERT_CU(cuDevicePrimaryCtxReset(device_)); }

 protected:
  void blocks_go_and_moves_go_on_after(void (TieredResetTest::*reset)());
};

TEST_F(TieredResetTest, AResetTakesTheBlocksAndMovesGoOnAfterIt) {
  blocks_go_and_moves_go_on_after(&TieredResetTest::reset_by_the_driver);
}

TEST_F(TieredResetTest, TheLastReleaseTakesTheBlocksAndMovesGoOnAfterIt) {
  blocks_go_and_moves_go_on_after(&TieredResetTest::release_and_retain);
}

void TieredResetTest::blocks_go_and_moves_go_on_after(void (TieredResetTest::*reset)()) {
  const auto twice_the_budget = [&](std::vector<CUdeviceptr>& blocks, uint32_t first_value) {
    blocks.resize(8);
    for (std::size_t round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (round == 0) {
          ASSERT_CU(cuMemAlloc(&blocks[i], kBlock));
        }
        ASSERT_CU(fill(blocks[i], first_value + static_cast<uint32_t>(i + round), streams_[i % 3]));
      }
    }
    ASSERT_CU(cuCtxSynchronize());
    for (std::size_t i = 0; i < blocks.size(); ++i)
      expect_block(blocks[i], first_value + static_cast<uint32_t>(i + 2));
  };
  std::vector<CUdeviceptr> before;
  twice_the_budget(before, 100);

  (this->*reset)();
  if (HasFatalFailure()) return;
  for (const CUdeviceptr block : before) EXPECT_EQ(cuMemFree(block), CUDA_ERROR_INVALID_VALUE);
  // The reset took the streams and the module too: a program makes them again.
  for (CUstream& stream : streams_) ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
  ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));

  std::vector<CUdeviceptr> after;
  twice_the_budget(after, 200);
  for (const CUdeviceptr block : after) ASSERT_CU(cuMemFree(block));
}

// ... and the blocks kept for stream-ordered reuse (Note [Reuse in stream order] in
// shim/tiers/stream_ordered_reuse.h), which the program freed and the shim holds for its next
// requests: the prefetch mover's managed memory went with the context, so a request after the
// reset that found one kept would hand out memory that no longer exists.
TEST_F(TieredTest, AResetTakesTheBlocksKeptForStreamOrderedReuse) {
  std::vector<CUdeviceptr> blocks(4);
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[0]));
  for (CUdeviceptr block : blocks) ASSERT_CU(fill(block, 5, streams_[0]));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  ASSERT_CU(cuDevicePrimaryCtxReset(device_));
  for (CUstream& stream : streams_) ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
  ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[0]));
  for (std::size_t i = 0; i < blocks.size(); ++i)
    ASSERT_CU(fill(blocks[i], static_cast<uint32_t>(60 + i), streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  for (std::size_t i = 0; i < blocks.size(); ++i)
    expect_block(blocks[i], static_cast<uint32_t>(60 + i));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
}

// The budget holds: with blocks of three times the budget allocated and touched, the device
// memory the driver itself has handed out (asked past the shim) stays within the budget.
TEST_F(TieredTest, TheBudgetHoldsWhateverIsAllocated) {
  const size_t free_at_start = driver_free();
  std::vector<CUdeviceptr> pointers(12);
  for (CUdeviceptr& pointer : pointers) {
    ASSERT_CU(cuMemAlloc(&pointer, kBlock));
    ASSERT_CU(fill(pointer, 7, streams_[0]));
    EXPECT_LE(free_at_start - driver_free(), 16 * kMiB) << "the arena holds more than the budget";
  }
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  for (CUdeviceptr pointer : pointers) expect_block(pointer, 7);
  for (CUdeviceptr pointer : pointers) ASSERT_CU(cuMemFree(pointer));
}

// With [tiered] mover = "prefetch" (Note [The prefetch mover] in shim/placement/
// prefetch_placement.h), every tiered block is managed memory whose last prefetch says where
// the mover put it: after launches over three times the budget, the blocks last prefetched to
// the device are exactly what the driver charges the device for, and fit the budget.
TEST_F(TieredTest, PrefetchedBlocksAreWhereTheDriverSays) {
  const size_t free_at_start = driver_free();
  std::vector<CUdeviceptr> blocks(12);
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAlloc(&block, kBlock));
  int managed = 0;
  ASSERT_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, blocks[0]));
  if (managed == 0) GTEST_SKIP() << "the remap mover's blocks are VMM memory";
  std::mt19937 random(2025);
  for (int launch = 0; launch < 60; ++launch) {
    const size_t index = launch < 12 ? static_cast<size_t>(launch) : random() % blocks.size();
    ASSERT_CU(fill(blocks[index], static_cast<uint32_t>(index), streams_[0]));
  }
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  const size_t free = driver_free();
  size_t on_device = 0;
  for (CUdeviceptr block : blocks) {
    int location = CU_DEVICE_INVALID;
    ASSERT_CU(cuMemRangeGetAttribute(&location, sizeof(location),
                                     CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, block, kBlock));
    // CU_DEVICE_INVALID: never prefetched (the card had no room when the block was made).
    EXPECT_TRUE(location == device_ || location == CU_DEVICE_CPU || location == CU_DEVICE_INVALID)
        << location;
    on_device += location == device_ ? kBlock : 0;
  }
  EXPECT_EQ(free_at_start - free, on_device) << "the driver's residency is not the last prefetches'";
  EXPECT_LE(on_device, 16 * kMiB) << "more on the device than the budget";
  EXPECT_GT(on_device, 0u) << "nothing was brought in";
  for (size_t index = 0; index < blocks.size(); ++index)
    expect_block(blocks[index], static_cast<uint32_t>(index));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// A tiered block answers for itself: its range is the allocation (not a granule), pitch is the
// driver's, and CUDA IPC refuses it.
TEST_F(TieredTest, QueriesSeeTheWholeAllocation) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, 3 * kMiB));
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &size, block + 2 * kMiB + 5));
  EXPECT_EQ(base, block);
  EXPECT_EQ(size, 3 * kMiB);
  CUipcMemHandle handle;
  EXPECT_EQ(cuIpcGetMemHandle(&handle, block), CUDA_ERROR_INVALID_VALUE);
  // cuMemAlloc memory to the program, which has no VMM handle: the granules' are the shim's.
  CUmemGenericAllocationHandle granule = 0;
  EXPECT_EQ(cuMemRetainAllocationHandle(&granule, reinterpret_cast<void*>(block + kMiB)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(block, 2 * kMiB), CUDA_ERROR_INVALID_VALUE);
  std::vector<uint8_t> bytes(3 * kMiB, 0x33);
  ASSERT_CU(cuMemcpyHtoD(block, bytes.data(), bytes.size()));  // still mapped
  ASSERT_CU(cuMemFree(block));

  CUdeviceptr pitched = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&pitched, &pitch, 1000, 2048, 4));
  EXPECT_EQ(pitch, 1024u);
  std::vector<uint8_t> rows(1000 * 2048, 0x5a);
  CUDA_MEMCPY2D to_device{};
  to_device.srcMemoryType = CU_MEMORYTYPE_HOST;
  to_device.srcHost = rows.data();
  to_device.srcPitch = 1000;
  to_device.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  to_device.dstDevice = pitched;
  to_device.dstPitch = pitch;
  to_device.WidthInBytes = 1000;
  to_device.Height = 2048;
  ASSERT_CU(cuMemcpy2D(&to_device));
  std::vector<uint8_t> back(1000);
  ASSERT_CU(cuMemcpyDtoH(back.data(), pitched + 2047 * pitch, 1000));
  EXPECT_EQ(back, std::vector<uint8_t>(1000, 0x5a));
  ASSERT_CU(cuMemFree(pitched));

  // Below [tiered] min_size: the driver's own allocation, which IPC shares.
  CUdeviceptr small = 0;
  ASSERT_CU(cuMemAlloc(&small, 256 * 1024));
  EXPECT_CU(cuIpcGetMemHandle(&handle, small));
  ASSERT_CU(cuMemFree(small));
}

// Note [No moves during a capture]: allocating past the budget while a stream is captured
// evicts nothing (a synchronisation would invalidate the capture), so the capture still ends
// with a graph, and that graph's kernel reaches the block wherever it is.
class CaptureTest : public TieredTest {
 protected:
  // Five blocks, one more than the budget, each filled with its index on stream 1, but the first,
  // evicted for the last and brought back by a fill of 10, whose copy the tracked window leaves
  // listed; stream 1 is done.
  void blocks_the_first_being_copied(std::vector<CUdeviceptr>& blocks) {
    blocks.resize(5);
    for (size_t i = 0; i < blocks.size(); ++i) {
      ASSERT_CU(cuMemAlloc(&blocks[i], kBlock));
      ASSERT_CU(fill(blocks[i], static_cast<uint32_t>(i), streams_[1]));
    }
    ASSERT_CU(fill(blocks[0], 10, streams_[1]));
    ASSERT_CU(cuStreamSynchronize(streams_[1]));
  }

  // `begin_capture(stream)` begins the capture.
  template <typename BeginCapture>
  void capture_survives_allocations_past_the_budget(BeginCapture begin_capture) {
    CUstream stream = streams_[0];
    std::vector<CUdeviceptr> pointers(4);  // the whole budget
    for (CUdeviceptr& pointer : pointers) ASSERT_CU(cuMemAlloc(&pointer, kBlock));
    ASSERT_CU(begin_capture(stream));
    CUdeviceptr late = 0;
    ASSERT_CU(cuMemAlloc(&late, kBlock));
    ASSERT_CU(fill(late, 0xC0FFEE, stream));
    CUgraph graph = nullptr;
    ASSERT_CU(cuStreamEndCapture(stream, &graph));
    CUgraphExec exec = nullptr;
    ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
    ASSERT_CU(cuGraphLaunch(exec, stream));
    ASSERT_CU(cuStreamSynchronize(stream));
    expect_block(late, 0xC0FFEE);
    ASSERT_CU(cuGraphExecDestroy(exec));
    ASSERT_CU(cuGraphDestroy(graph));
    ASSERT_CU(cuMemFree(late));
    for (CUdeviceptr pointer : pointers) ASSERT_CU(cuMemFree(pointer));
  }
};

TEST_F(CaptureTest, ACaptureSurvivesAllocationsPastTheBudget) {
  capture_survives_allocations_past_the_budget(
      [](CUstream stream) { return cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL); });
}

// CUDA 10.0's cuStreamBeginCapture, which a lookup at version 10000 answers, is counted as its
// successor is: uncounted, the allocation's eviction would synchronise and invalidate the capture.
TEST_F(CaptureTest, ACaptureBegunThroughCuda10sEntryPointIsCountedToo) {
  void* found = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_CU(cuGetProcAddress("cuStreamBeginCapture", &found, 10000, CU_GET_PROC_ADDRESS_DEFAULT,
                             &status));
  ASSERT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  const auto begin_capture_v1 = reinterpret_cast<CUresult(CUDAAPI*)(CUstream)>(found);
  capture_survives_allocations_past_the_budget(begin_capture_v1);
}

// A capture into a graph the program made (cuStreamBeginCaptureToGraph, as XLA's command buffers
// capture) is counted too.
TEST_F(CaptureTest, ACaptureIntoAGraphIsCountedToo) {
  CUgraph into = nullptr;
  ASSERT_CU(cuGraphCreate(&into, 0));
  capture_survives_allocations_past_the_budget([&](CUstream stream) {
    return cuStreamBeginCaptureToGraph(stream, into, nullptr, nullptr, 0,
                                       CU_STREAM_CAPTURE_MODE_GLOBAL);
  });
}

// Note [Copies and captures] in shim/tiers/driver_granule_ops.cpp: a launch captured on one
// stream, of a block whose promotion is still being copied (the tracked window copies on the
// device, after the window), neither waits on the host, which beside a capture breaks it (as a
// query broke PyTorch's captures: pytorch/pytorch#104487), nor on the device, which would take
// an event recorded outside the capture into it. Its graph, launched later, waits for the copy.
TEST_F(CaptureTest, ACapturedLaunchOfABlockBeingCopiedLeavesTheCaptureValid) {
  std::vector<CUdeviceptr> blocks;
  ASSERT_NO_FATAL_FAILURE(blocks_the_first_being_copied(blocks));
  CUstream capturing = streams_[0];
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(fill(blocks[0], 20, capturing));
  ASSERT_CU(fill(blocks[1], 21, streams_[1]));  // beside the capture: waits on the device
  ASSERT_NO_FATAL_FAILURE(replay_capture(capturing));
  expect_block(blocks[0], 20);
  expect_block(blocks[1], 21);
  for (size_t i = 2; i < blocks.size(); ++i) expect_block(blocks[i], static_cast<uint32_t>(i));
  for (const CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// ... and the program's allocations and frees beside the capture while that copy is still listed
// (Note [Copies in flight beside a capture] in shim/tiers/granule_arena.h): the new block takes no
// granule a copy may still use, and the block being copied, freed in stream order and kept, whose
// room the new block takes (Note [Kept blocks give room to every request]), keeps its granules
// until the copies are over; neither waits for them on the host, which breaks the capture. The
// kept block's free is reached once the shim's host function runs on its stream: the new block
// waits a moment for that.
TEST_F(CaptureTest, AllocationsAndFreesBesideACaptureWaitForNoCopyOnTheHost) {
  std::vector<CUdeviceptr> blocks;
  ASSERT_NO_FATAL_FAILURE(blocks_the_first_being_copied(blocks));
  CUstream capturing = streams_[0];
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(fill(blocks[2], 20, capturing));
  ASSERT_CU(cuMemFreeAsync(blocks[0], streams_[1]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CUdeviceptr beside = 0;
  ASSERT_CU(cuMemAlloc(&beside, kBlock));
  ASSERT_CU(fill(beside, 21, streams_[1]));
  ASSERT_NO_FATAL_FAILURE(replay_capture(capturing));
  expect_block(blocks[2], 20);
  expect_block(beside, 21);
  for (const size_t i : {1, 3, 4}) expect_block(blocks[i], static_cast<uint32_t>(i));
  for (size_t i = 1; i < blocks.size(); ++i) ASSERT_CU(cuMemFree(blocks[i]));
  ASSERT_CU(cuMemFree(beside));
}

// Note [Counting captures] in shim/core/capture_origins.h: a capture whose stream the program
// destroys ends with it. Counted still, it would keep every block where it is for the rest of
// the process; here blocks move both ways after it (its ctest requires the summary to say so).
TEST_F(TieredTest, ACaptureEndsWithItsDestroyedStream) {
  CUstream doomed = nullptr;
  ASSERT_CU(cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(doomed, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuStreamDestroy(doomed));  // never ended
  std::vector<CUdeviceptr> blocks(5);  // one more than the budget
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_CU(cuMemAlloc(&blocks[i], kBlock));
    ASSERT_CU(fill(blocks[i], static_cast<uint32_t>(i), streams_[0]));
  }
  ASSERT_CU(fill(blocks[0], 9, streams_[0]));  // evicted for the last one: it comes back
  ASSERT_CU(cuCtxSynchronize());
  expect_block(blocks[0], 9);
  for (size_t i = 1; i < blocks.size(); ++i) expect_block(blocks[i], static_cast<uint32_t>(i));
  for (const CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// Note [A capture begun while a move is queued] in shim/tiers/driver_prefetch_ops.h, for the
// tracked window: a capture the shim has not counted (begun here behind its back, as one begun on
// another thread after a submission's driver call would be) gets no event of the window recorded
// into it. Such an event marks the use as the capture's, and the move that later waits for it
// (the first block's eviction below) would be refused by the driver (CUDA_ERROR_CAPTURED_EVENT).
TEST_F(TieredTest, AStreamCapturedBehindTheShimsBackGetsNoEventOfTheWindow) {
  // Begun and ended where the shim cannot count it.
  const auto begin_capture_v1 = behind_the_shim<CUresult (*)(CUstream)>("cuStreamBeginCapture");
  const auto end_capture =
      behind_the_shim<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
  ASSERT_NE(begin_capture_v1, nullptr);
  ASSERT_NE(end_capture, nullptr);
  CUstream capturing = streams_[0];
  std::vector<CUdeviceptr> blocks(4);  // the whole budget
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAlloc(&block, kBlock));
  ASSERT_CU(begin_capture_v1(capturing));
  for (uint32_t round = 0; round < 8; ++round)  // past the submissions between two events
    ASSERT_CU(fill(blocks[0], round, capturing));
  CUgraph graph = nullptr;
  ASSERT_CU(end_capture(capturing, &graph));
  for (size_t i = 1; i < blocks.size(); ++i)  // the first block is now the least recently used
    ASSERT_CU(fill(blocks[i], static_cast<uint32_t>(100 + i), streams_[1]));
  CUdeviceptr late = 0;
  ASSERT_CU(cuMemAlloc(&late, kBlock));  // evicts the first block, last used by the capture
  ASSERT_CU(fill(late, 200, streams_[1]));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, capturing));
  ASSERT_CU(cuCtxSynchronize());
  expect_block(blocks[0], 7);
  for (size_t i = 1; i < blocks.size(); ++i) expect_block(blocks[i], static_cast<uint32_t>(100 + i));
  expect_block(late, 200);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(late));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// Note [Stream-ordered requests in the arena]: a stream-ordered request on a stream that is not
// captured, while another stream captures in global mode, makes and frees no memory the capture
// forbids (with the prefetch mover a request may free a kept block and make a managed one: it goes
// to its pool instead), so the capture ends with a graph.
TEST_F(TieredTest, AStreamOrderedRequestLeavesAnotherStreamsCaptureValid) {
  std::vector<CUdeviceptr> blocks(4);  // the whole budget
  for (CUdeviceptr& block : blocks) {
    ASSERT_CU(cuMemAlloc(&block, kBlock));
    ASSERT_CU(fill(block, 5, streams_[1]));
  }
  CUdeviceptr kept = 0;  // made on the host, and kept at its free, which its stream then reaches
  ASSERT_CU(cuMemAllocAsync(&kept, kBlock, streams_[1]));
  ASSERT_CU(fill(kept, 6, streams_[1]));
  ASSERT_CU(cuMemFreeAsync(kept, streams_[1]));
  ASSERT_CU(cuStreamSynchronize(streams_[1]));
  ASSERT_CU(cuStreamBeginCapture(streams_[0], CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr again = 0;
  ASSERT_CU(cuMemAllocAsync(&again, kBlock, streams_[1]));
  ASSERT_CU(fill(blocks[0], 7, streams_[0]));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(streams_[0], &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, streams_[0]));
  ASSERT_CU(cuMemFreeAsync(again, streams_[1]));
  ASSERT_CU(cuCtxSynchronize());
  expect_block(blocks[0], 7);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  for (CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// Note [Kept blocks give room to every request] in shim/placement/stream_ordered_blocks.h: blocks
// the program freed in stream order, kept for its next requests, give their room to cuMemAlloc
// too. Evicted without a copy instead, they would fill the host limit (24 MiB here:
// CMakeLists.txt) with memory the program freed, and the second allocation, for which the first
// must go to the host, would be refused.
TEST_F(TieredTest, KeptBlocksGiveTheirRoomToOtherAllocations) {
  std::vector<CUdeviceptr> scratch(6);  // one and a half budgets, freed and kept
  for (CUdeviceptr& block : scratch) {
    ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[0]));
    ASSERT_CU(fill(block, 1, streams_[0]));
  }
  for (const CUdeviceptr block : scratch) ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));  // their frees reached
  CUdeviceptr first = 0;
  CUdeviceptr second = 0;
  ASSERT_CU(cuMemAlloc(&first, 4 * kBlock));  // the whole budget
  ASSERT_CU(fill(first, 2, streams_[0]));
  ASSERT_CU(cuMemAlloc(&second, 4 * kBlock));  // the first goes to the host for it
  ASSERT_CU(fill(second, 3, streams_[0]));
  ASSERT_CU(fill(first, 4, streams_[0]));  // and comes back
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  expect_block(first, 4);
  expect_block(second, 3);
  ASSERT_CU(cuMemFree(first));
  ASSERT_CU(cuMemFree(second));
}

// ... but a request too small to be a tiered block (a library's workspace) takes none of their
// room: the kept blocks serve the next stream-ordered requests (its ctest requires both reused).
TEST_F(TieredTest, ASmallAllocationLeavesTheKeptBlocksKept) {
  std::vector<CUdeviceptr> scratch(2);
  for (CUdeviceptr& block : scratch) ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[0]));
  for (const CUdeviceptr block : scratch) ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));  // their frees reached
  CUdeviceptr workspace = 0;
  ASSERT_CU(cuMemAlloc(&workspace, 64 * 1024));
  for (CUdeviceptr& block : scratch) ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[0]));
  for (const CUdeviceptr block : scratch) ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  ASSERT_CU(cuMemFree(workspace));
}

// Note [Refreshing pool figures] in shim/placement/pool_books.cpp: the driver takes a pool's idle
// memory back at a synchronisation (release threshold 0) or a trim, which the shim does not see.
// With the pool's old figure, a tiered block made next went partly to the host, and a launch's
// promotion was refused for room the device had (its ctest requires none refused; the pool serves
// stream-ordered requests itself here: CMakeLists.txt). A block of the whole budget, 64 MiB.
TEST_F(TieredTest, APoolsIdleMemoryIsRoomForTheNextBlock) {
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAllocAsync(&buffer, 3 * kBlock, streams_[0]));  // the pool grows by 32 MiB
  ASSERT_CU(cuMemFreeAsync(buffer, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));  // and gives it back
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, 16 * kBlock));
  fill_check_and_free(block, 6);
}

// A block of the whole budget made while the pool held 32 MiB (half of the block went to the
// host), then the pool's block freed and its stream synchronised, where the pool gives its memory
// back.
void make_a_block_beside_a_pool(CUstream stream, CUdeviceptr& block) {
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAllocAsync(&buffer, 3 * kBlock, stream));
  ASSERT_CU(cuMemAlloc(&block, 16 * kBlock));
  ASSERT_CU(cuMemFreeAsync(buffer, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
}

// ... and at a trim, which a launch's promotion then finds.
TEST_F(TieredTest, APoolsTrimIsRoomForTheNextPromotion) {
  CUdeviceptr block = 0;
  ASSERT_NO_FATAL_FAILURE(make_a_block_beside_a_pool(streams_[0], block));
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&pool, device_));
  ASSERT_CU(cuMemPoolTrimTo(pool, 0));
  fill_check_and_free(block, 7);
}

// ... and at a synchronisation, which a launch's promotion finds too: a launch that touches blocks
// with host granules reads the pools' figures again before the policy decides.
TEST_F(TieredTest, APoolsIdleMemoryIsRoomForTheNextPromotion) {
  CUdeviceptr block = 0;
  ASSERT_NO_FATAL_FAILURE(make_a_block_beside_a_pool(streams_[0], block));
  fill_check_and_free(block, 8);
}

// Several threads submit at once while their blocks move: each thread's fills and copies on its
// own stream, over three times the budget in all, must come back byte for byte (the remap
// window holds every thread's submissions while a move remaps).
TEST_F(TieredTest, ThreadsSubmitWhileBlocksMove) {
  constexpr int kThreads = 3;
  constexpr int kBlocksEach = 4;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int& failed = failures[static_cast<size_t>(t)];
      const auto ok = [&](CUresult result) { failed += result != CUDA_SUCCESS ? 1 : 0; };
      ok(cuCtxSetCurrent(context_));
      CUstream stream = streams_[t];
      CUdeviceptr blocks[kBlocksEach] = {};
      uint32_t values[kBlocksEach] = {};
      for (CUdeviceptr& block : blocks) ok(cuMemAlloc(&block, kBlock));
      for (int step = 0; step < 40; ++step) {
        const int i = step % kBlocksEach;
        const int j = (step * 3 + 1) % kBlocksEach;
        values[i] = static_cast<uint32_t>(t * 100000 + step);
        ok(fill(blocks[i], values[i], stream));
        if (i != j) {
          ok(copy(blocks[j], blocks[i], stream));
          values[j] = values[i];
        }
      }
      ok(cuStreamSynchronize(stream));
      std::vector<uint32_t> words(kWords);
      for (int i = 0; i < kBlocksEach; ++i) {
        ok(cuMemcpyDtoH(words.data(), blocks[i], kBlock));
        for (const uint32_t word : words) failed += word != values[i] ? 1 : 0;
        ok(cuMemFree(blocks[i]));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(failures[static_cast<size_t>(t)], 0) << "thread " << t;
}

// A thread asks about the blocks' pointers while the program's work moves them back and forth
// (twice the budget, filled in turn): every answer is the one the driver gave before the moves,
// by either query, although the remap mover unmaps a block's granules for a moment each time it
// moves them (Note [Pointer queries in the remap window] in shim/hooks/pointer_hooks.cpp).
TEST_F(TieredTest, PointerQueriesAnswerWhileBlocksMove) {
  std::vector<CUdeviceptr> blocks(8);
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAlloc(&block, kBlock));
  unsigned int type_before = 0;
  ASSERT_CU(cuPointerGetAttribute(&type_before, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, blocks[0]));
  std::atomic<bool> moving{true};
  uint64_t queries = 0;
  uint64_t wrong = 0;
  std::thread asker([&] {
    CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    for (size_t next = 0; moving.load(); ++next) {
      const CUdeviceptr asked = blocks[next % blocks.size()] + kBlock / 2;  // its second granule
      unsigned int single = 0;
      unsigned int batched = 0;
      void* data[] = {&batched};
      const CUresult one = cuPointerGetAttribute(&single, attribute, asked);
      const CUresult all = cuPointerGetAttributes(1, &attribute, data, asked);
      wrong += one != CUDA_SUCCESS || single != type_before ? 1 : 0;
      wrong += all != CUDA_SUCCESS || batched != type_before ? 1 : 0;
      queries += 2;
    }
  });
  constexpr uint32_t kRounds = 48;
  CUresult filled = CUDA_SUCCESS;
  for (uint32_t round = 0; round < kRounds && filled == CUDA_SUCCESS; ++round)
    for (size_t i = 0; i < blocks.size() && filled == CUDA_SUCCESS; ++i)
      filled = fill(blocks[i], round, streams_[0]);
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  moving.store(false);
  asker.join();
  ASSERT_CU(filled);
  EXPECT_EQ(wrong, 0u) << "of " << queries << " answers about a moving block";
  for (const CUdeviceptr block : blocks) expect_block(block, kRounds - 1);
  for (const CUdeviceptr block : blocks) EXPECT_CU(cuMemFree(block));
}

// A gate a host function waits at, on the stream it holds, until the test opens it.
struct Gate {
  std::mutex mutex;
  std::condition_variable opened_changed;
  bool opened = false;
  static void CUDA_CB wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    std::unique_lock lock(gate->mutex);
    gate->opened_changed.wait(lock, [gate] { return gate->opened; });
  }
  void open() {
    {
      const std::lock_guard lock(mutex);
      opened = true;
    }
    opened_changed.notify_all();
  }
};

// cuMemFreeAsync of a tiered block returns while its stream is still held by earlier work (the
// program may be the one that lets it go on), and the block is freed once the stream gets there:
// its granules leave the budget.
TEST_F(TieredTest, AStreamOrderedFreeDoesNotWaitForItsStream) {
  size_t free_at_start = 0;
  size_t total = 0;
  ASSERT_CU(cuMemGetInfo(&free_at_start, &total));
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, kBlock));
  Gate gate;
  ASSERT_CU(fill(block, 1, streams_[0]));
  ASSERT_CU(cuLaunchHostFunc(streams_[0], &Gate::wait, &gate));
  ASSERT_CU(cuMemFreeAsync(block, streams_[0]));  // would hang here if it waited for the stream
  gate.open();
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  // The shim's free thread gives the granules back once the stream has passed the free.
  const size_t free_now = free_once_given_back(free_at_start);
  EXPECT_EQ(free_now, free_at_start) << "the block's granules were not given back";
}

constexpr CUdevice kDeviceOne = 1;

// Retains device 1's primary context into `context`, makes it current (the caller pops it) and
// makes a stream of its own there.
void enter_device_one(CUcontext& context, CUstream& stream) {
  ASSERT_CU(cuDevicePrimaryCtxRetain(&context, kDeviceOne));
  ASSERT_CU(cuCtxPushCurrent(context));
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
}

// A program may free one device's block with another device's context current (the driver finds
// an allocation by its address): the shim gives the block back to its own device's arena, both
// at once and in stream order, where it once looked in the current device's and refused.
TEST_F(TieredTest, ABlockFreedWithAnotherDeviceCurrentGoesBack) {
  int devices = 0;
  ASSERT_CU(cuDeviceGetCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs two devices (ctest tiered.free_with_another_device_*)";
  size_t free_at_start = 0;
  size_t total = 0;
  ASSERT_CU(cuMemGetInfo(&free_at_start, &total));
  CUdeviceptr at_once = 0;
  CUdeviceptr in_order = 0;
  ASSERT_CU(cuMemAlloc(&at_once, kBlock));
  ASSERT_CU(cuMemAlloc(&in_order, kBlock));
  ASSERT_CU(fill(at_once, 1, streams_[0]));
  ASSERT_CU(fill(in_order, 2, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  CUcontext other_context = nullptr;
  CUstream other_stream = nullptr;
  ASSERT_NO_FATAL_FAILURE(enter_device_one(other_context, other_stream));
  EXPECT_CU(cuMemFree(at_once));
  EXPECT_CU(cuMemFreeAsync(in_order, other_stream));
  EXPECT_CU(cuStreamSynchronize(other_stream));
  EXPECT_CU(cuStreamDestroy(other_stream));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_CU(cuDevicePrimaryCtxRelease(kDeviceOne));
  // The shim's free thread gives the second block's granules back once its stream is past it.
  const size_t free_now = free_once_given_back(free_at_start);
  EXPECT_EQ(free_now, free_at_start) << "a block's granules were not given back";
}

// Note [Who may reach a granule]: another device's work on a block, through peer access, is
// waited for before the block moves, as the block's own device's is. Device 1's write of the
// block is queued behind a wait that a thread ends 200 ms later, while device 0 makes room for
// new blocks by evicting it at once: simcuda reports a remap under the queued write.
TEST_F(TieredTest, APeersWorkOnABlockIsWaitedForBeforeTheBlockMoves) {
  int devices = 0;
  ASSERT_CU(cuDeviceGetCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs two devices (ctest tiered.peer_work_*)";
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, kBlock));
  ASSERT_CU(fill(block, 1, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  void* flag = nullptr;
  ASSERT_CU(cuMemHostAlloc(&flag, sizeof(uint32_t),
                           CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(flag)).store(0);
  CUcontext other_context = nullptr;
  CUstream other_stream = nullptr;
  ASSERT_NO_FATAL_FAILURE(enter_device_one(other_context, other_stream));
  ASSERT_CU(cuStreamWaitValue32(other_stream, reinterpret_cast<CUdeviceptr>(flag), 1,
                                CU_STREAM_WAIT_VALUE_GEQ));
  constexpr uint32_t kWritten = 7;
  ASSERT_CU(cuMemsetD32Async(block, kWritten, kWords, other_stream));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  std::thread later([flag] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(flag)).store(1);
  });
  // The budget holds four blocks: the fourth made now evicts the least recently used, the first.
  std::vector<CUdeviceptr> made(4);
  for (CUdeviceptr& next : made) {
    ASSERT_CU(cuMemAlloc(&next, kBlock));
    ASSERT_CU(fill(next, 2, streams_[0]));
  }
  later.join();
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  ASSERT_CU(cuCtxPushCurrent(other_context));
  EXPECT_CU(cuStreamSynchronize(other_stream));
  EXPECT_CU(cuStreamDestroy(other_stream));
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_CU(cuDevicePrimaryCtxRelease(kDeviceOne));
  EXPECT_CU(cuMemFreeHost(flag));
  expect_block(block, kWritten);
  for (const CUdeviceptr next : made) ASSERT_CU(cuMemFree(next));
  ASSERT_CU(cuMemFree(block));
}

// Note [Stream-ordered requests in tiered mode] with Note [No moves during a capture]: a
// stream-ordered request on a captured stream that finds the budget full of tiered blocks may get
// room only from granules the arena holds idle, never from evictions, whose synchronisation would
// invalidate the capture; the capture ends with a graph whatever the request got. Run with a
// 48 MiB budget (the 32 MiB chunk a pool grows by must fit in it).
TEST_F(TieredTest, AStreamOrderedRequestInACaptureMovesNothing) {
  size_t room = 0;
  size_t total = 0;
  ASSERT_CU(cuMemGetInfo(&room, &total));
  std::vector<CUdeviceptr> blocks(total / kBlock);  // the whole budget
  for (CUdeviceptr& block : blocks) ASSERT_CU(cuMemAlloc(&block, kBlock));
  ASSERT_CU(cuMemGetInfo(&room, &total));
  ASSERT_EQ(room, 0u) << "the tiered blocks should hold the whole budget";
  ASSERT_CU(cuStreamBeginCapture(streams_[0], CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr buffer = 0;
  const CUresult allocated = cuMemAllocAsync(&buffer, kBlock, streams_[0]);
  EXPECT_TRUE(allocated == CUDA_SUCCESS || allocated == CUDA_ERROR_OUT_OF_MEMORY) << allocated;
  if (allocated == CUDA_SUCCESS) {
    ASSERT_CU(fill(buffer, 0xACE, streams_[0]));
    ASSERT_CU(copy(blocks.front(), buffer, streams_[0]));
    ASSERT_CU(cuMemFreeAsync(buffer, streams_[0]));
  }
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(streams_[0], &graph));  // fails if the shim synchronised
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  if (allocated == CUDA_SUCCESS) expect_block(blocks.front(), 0xACE);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  for (const CUdeviceptr block : blocks) ASSERT_CU(cuMemFree(block));
}

// Note [Reuse in stream order]: a block freed with cuMemFreeAsync on one stream is not handed to
// a request on another until the first stream has reached the free. Stream 0 is held at a gate
// with a fill of the block queued behind it, then frees it; stream 1's request meanwhile must get
// other memory, or the fill would overwrite what stream 1 writes. Once stream 0 is past the free,
// stream 1's next request of the size gets the block.
TEST_F(TieredTest, AFreedBlockWaitsForItsStreamBeforeAnotherStreamHasIt) {
  CUdeviceptr first = 0;
  ASSERT_CU(cuMemAllocAsync(&first, kBlock, streams_[0]));
  Gate gate;
  ASSERT_CU(cuLaunchHostFunc(streams_[0], &Gate::wait, &gate));
  ASSERT_CU(fill(first, 1, streams_[0]));
  ASSERT_CU(cuMemFreeAsync(first, streams_[0]));
  CUdeviceptr second = 0;
  ASSERT_CU(cuMemAllocAsync(&second, kBlock, streams_[1]));
  EXPECT_NE(second, first) << "handed to stream 1 before stream 0 reached the free";
  ASSERT_CU(fill(second, 2, streams_[1]));
  ASSERT_CU(cuStreamSynchronize(streams_[1]));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  expect_block(second, 2);
  CUdeviceptr third = 0;
  ASSERT_CU(cuMemAllocAsync(&third, kBlock, streams_[1]));
  EXPECT_EQ(third, first) << "stream 0 is past the free: its block serves stream 1";
  ASSERT_CU(fill(third, 3, streams_[1]));
  ASSERT_CU(cuStreamSynchronize(streams_[1]));
  expect_block(third, 3);
  expect_block(second, 2);
  ASSERT_CU(cuMemFreeAsync(second, streams_[1]));
  ASSERT_CU(cuMemFreeAsync(third, streams_[1]));
}

// Reuse in stream order asks the driver whether a stream with kept blocks is past their frees
// (cuStreamQuery), but not while a capture is in progress: a query of the capturing stream would
// break the capture. Stream 0 is held at a gate with a kept block's free queued behind it, then
// begins a capture; another stream's request meanwhile must leave the capture valid.
TEST_F(TieredTest, AStreamIsNotAskedAboutItsKeptBlocksWhileItCaptures) {
  CUdeviceptr first = 0;
  ASSERT_CU(cuMemAllocAsync(&first, kBlock, streams_[0]));
  Gate gate;
  ASSERT_CU(cuLaunchHostFunc(streams_[0], &Gate::wait, &gate));
  ASSERT_CU(cuMemFreeAsync(first, streams_[0]));
  ASSERT_CU(cuStreamBeginCapture(streams_[0], CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr second = 0;
  ASSERT_CU(cuMemAllocAsync(&second, kBlock, streams_[1]));
  EXPECT_NE(second, first);
  CUgraph graph = nullptr;
  EXPECT_CU(cuStreamEndCapture(streams_[0], &graph)) << "the request broke the capture";
  if (graph != nullptr) {
    EXPECT_CU(cuGraphDestroy(graph));
  }
  gate.open();
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  ASSERT_CU(cuMemFreeAsync(second, streams_[1]));
  ASSERT_CU(cuStreamSynchronize(streams_[1]));
}

// The same request on the same stream has the block at once, before the stream gets to the free:
// stream order puts its work after the work that used the block.
TEST_F(TieredTest, AFreedBlockServesItsOwnStreamAtOnce) {
  CUdeviceptr first = 0;
  ASSERT_CU(cuMemAllocAsync(&first, kBlock, streams_[0]));
  Gate gate;
  ASSERT_CU(cuLaunchHostFunc(streams_[0], &Gate::wait, &gate));
  ASSERT_CU(fill(first, 1, streams_[0]));
  ASSERT_CU(cuMemFreeAsync(first, streams_[0]));
  CUdeviceptr again = 0;
  ASSERT_CU(cuMemAllocAsync(&again, kBlock, streams_[0]));
  EXPECT_EQ(again, first);
  ASSERT_CU(fill(again, 2, streams_[0]));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  expect_block(again, 2);
  ASSERT_CU(cuMemFreeAsync(again, streams_[0]));
}

// cuMemPoolTrimTo of the default pool gives the kept blocks back to the arena, as it gives back
// a pool's unused memory: the next request makes a new block.
TEST_F(TieredTest, TrimmingThePoolGivesTheKeptBlocksBack) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[0]));
  ASSERT_CU(fill(block, 1, streams_[0]));
  ASSERT_CU(cuMemFreeAsync(block, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&pool, device_));
  ASSERT_CU(cuMemPoolTrimTo(pool, 0));
  CUdeviceptr again = 0;
  ASSERT_CU(cuMemAllocAsync(&again, kBlock, streams_[0]));
  ASSERT_CU(fill(again, 2, streams_[0]));
  ASSERT_CU(cuStreamSynchronize(streams_[0]));
  expect_block(again, 2);
  ASSERT_CU(cuMemFreeAsync(again, streams_[0]));
}

}  // namespace
