// Every route by which spilled memory is allocated and freed (issue item 9; shim/README.md,
// "Budgets and honesty": cuMemFreeAsync of a spilled pointer still frees in stream order):
// cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAllocAsync and cuMemAllocFromPoolAsync
// (plain and per-thread) that spilled, freed by cuMemFree_v2, cuMemFreeAsync and
// cuMemFreeAsync_ptsz; a stream-ordered free of a spilled block is ordered after the work queued
// before it; and freed bytes come back.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "spill_support.h"

namespace {

using spill::bits_of;
using spill::kBlock;
using spill::kMiB;
using spill::pattern;
using spill::Tier;
using spill::tier_name;
using spill::tier_of;

constexpr size_t kWords = kBlock / sizeof(uint32_t);

// A gate for a stream: a host function that blocks the stream until the test opens it (or a
// watchdog does, so a call that wrongly waits for the stream fails the test instead of hanging it).
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false;
  bool opened_by_watchdog = false;

  static void CUDA_CB wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    std::unique_lock lock(gate->mutex);
    gate->changed.wait(lock, [gate] { return gate->open; });
  }
  void release(bool by_watchdog = false) {
    std::lock_guard lock(mutex);
    if (open) return;
    open = true;
    opened_by_watchdog = by_watchdog;
    changed.notify_all();
  }
};

class FreeRoutes : public spill::SpillTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SpillTest::SetUp());
    ASSERT_FALSE(spill::spilling_off());
    ASSERT_NO_FATAL_FAILURE(fill_device(device_blocks_));
    ASSERT_NO_FATAL_FAILURE(routes::look_up_per_thread_exports(per_thread_, /*from_shim=*/true));
  }

  void TearDown() override {
    free_all(device_blocks_);
    EXPECT_EQ(free_bytes(), expected_free(0));
    SpillTest::TearDown();
  }

  // The device is full: `pointer` must have spilled, to the configured tier (`tier` for the
  // routes that always spill to one).
  static void expect_spilled(CUdeviceptr pointer, Tier tier = spill::expected_tier()) {
    ASSERT_NE(pointer, 0u);
    EXPECT_EQ(tier_of(pointer), tier) << tier_name(tier_of(pointer));
  }

  // Writes a pattern into `bytes` at `pointer` with a kernel on `stream` and reads it back with
  // an asynchronous copy on the same stream.
  void write_and_check(CUdeviceptr pointer, size_t bytes, uint32_t seed, CUstream stream) {
    const size_t words = bytes / sizeof(uint32_t);
    ASSERT_CU(fill(pointer, seed, words, stream));
    std::vector<uint32_t> back(words);
    ASSERT_CU(cuMemcpyDtoHAsync(back.data(), pointer, bytes, stream));
    ASSERT_CU(cuStreamSynchronize(stream));
    for (size_t j = 0; j < words; j += 4099) ASSERT_EQ(back[j], seed) << "word " << j;
    ASSERT_EQ(back[words - 1], seed);
  }

  void free_async_is_ordered(CUstream stream, bool stream_ordered_allocation, bool per_thread_free);

  // `block` (kBlock bytes) holds exactly `expected`: nothing queued before the free of another
  // block overwrote it.
  static void expect_holds(CUdeviceptr block, const std::vector<uint32_t>& expected) {
    std::vector<uint32_t> back(kWords);
    ASSERT_CU(cuMemcpyDtoH(back.data(), block, kBlock));
    size_t wrong = 0;
    for (size_t j = 0; j < kWords; ++j) wrong += back[j] != expected[j] ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "words of the new block overwritten by work queued before the free "
                            "of another (first word now "
                         << std::hex << back[0] << ")";
  }

  std::vector<CUdeviceptr> device_blocks_;
  routes::PerThreadExports per_thread_;
};

TEST_F(FreeRoutes, MemAllocFreedByMemFree) {
  for (int round = 0; round < 3; ++round) {
    CUdeviceptr pointer = 0;
    ASSERT_CU(cuMemAlloc(&pointer, kBlock));
    ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer));
    ASSERT_NO_FATAL_FAILURE(write_and_check(pointer, kBlock, 0x5a5a0000u + round, stream_));
    // Queued work on the block is finished by cuMemFree (which waits, as the driver's does).
    ASSERT_CU(fill(pointer, 1, kWords, stream_));
    ASSERT_CU(cuMemFree(pointer));
    EXPECT_EQ(cuMemFree(pointer), CUDA_ERROR_INVALID_VALUE) << "freed twice";
    EXPECT_EQ(free_bytes(), expected_free(device_blocks_.size() * kBlock));
  }
}

TEST_F(FreeRoutes, MemAllocPitchFreedByMemFree) {
  CUdeviceptr pointer = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&pointer, &pitch, 1000, 1024, 4));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer));
  EXPECT_GE(pitch, 1000u);
  EXPECT_EQ(pitch % 4, 0u);
  ASSERT_NO_FATAL_FAILURE(write_and_check(pointer, pitch * 1024, 0x17171717u, stream_));
  ASSERT_CU(cuMemFree(pointer));
}

// cuMemAllocManaged over the budget spills to managed memory whatever the mode: it keeps its
// semantics (Note [What spills]), the host reads it by the same pointer.
TEST_F(FreeRoutes, MemAllocManagedStaysManaged) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAllocManaged(&pointer, kBlock, CU_MEM_ATTACH_GLOBAL));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer, Tier::kManaged));
  ASSERT_NO_FATAL_FAILURE(write_and_check(pointer, kBlock, 0x42424242u, stream_));
  EXPECT_EQ(reinterpret_cast<const uint32_t*>(pointer)[kWords - 1], 0x42424242u);
  ASSERT_CU(cuMemFree(pointer));
}

TEST_F(FreeRoutes, MemAllocFreedByMemFreeAsync) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc(&pointer, kBlock));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer));
  ASSERT_NO_FATAL_FAILURE(write_and_check(pointer, kBlock, 0x01020304u, stream_));
  ASSERT_CU(fill(pointer, 9, kWords, stream_));
  ASSERT_CU(cuMemFreeAsync(pointer, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(free_bytes(), expected_free(device_blocks_.size() * kBlock));
}

// Note [Stream-ordered frees on the shim's thread] in shim/tiers/stream_ordered_frees.h: a
// spilled block freed in stream order is freed by the shim's own thread, whose cuMemFree would
// break another stream's capture in global mode: it waits for the capture to end, which ends
// valid.
TEST_F(FreeRoutes, AFreeInStreamOrderLeavesACaptureValid) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc(&pointer, kBlock));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer));
  CUstream capturing = nullptr;
  ASSERT_CU(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemFreeAsync(pointer, stream_));
  // Long enough for the shim's thread to have the block: its stream has nothing left to run.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CUgraph graph = nullptr;
  EXPECT_CU(cuStreamEndCapture(capturing, &graph)) << "the free broke the capture";
  if (graph != nullptr) {
    EXPECT_CU(cuGraphDestroy(graph));
  }
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuStreamDestroy(capturing));
}

// Note [Stream-ordered spills beside a capture] in shim/placement/spill_placement.h: a
// stream-ordered request past the budget on a stream that is not captured, while another stream
// captures in global mode, spills to nothing that breaks the capture (managed memory may not be
// made then): the host pool takes it, or it is refused, and the capture ends valid.
TEST_F(FreeRoutes, AStreamOrderedSpillLeavesAnotherStreamsCaptureValid) {
  CUstream capturing = nullptr;
  ASSERT_CU(cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr pointer = 0;
  const CUresult allocated = cuMemAllocAsync(&pointer, kBlock, stream_);
  CUgraph graph = nullptr;
  EXPECT_CU(cuStreamEndCapture(capturing, &graph)) << "the spill broke the capture";
  if (graph != nullptr) {
    EXPECT_CU(cuGraphDestroy(graph));
  }
  if (allocated == CUDA_SUCCESS) {
    EXPECT_NO_FATAL_FAILURE(expect_spilled(pointer, Tier::kHost));
    ASSERT_NO_FATAL_FAILURE(write_and_check(pointer, kBlock, 0x5eed5eedu, stream_));
    ASSERT_CU(cuMemFreeAsync(pointer, stream_));
  } else {
    EXPECT_EQ(allocated, CUDA_ERROR_OUT_OF_MEMORY);
  }
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuStreamDestroy(capturing));
}

TEST_F(FreeRoutes, MemAllocAsyncSpillsAndIsFreedInStreamOrder) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAllocAsync(&pointer, kBlock, stream_));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer));
  ASSERT_NO_FATAL_FAILURE(write_and_check(pointer, kBlock, 0xabcdef01u, stream_));
  ASSERT_CU(cuMemFreeAsync(pointer, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(free_bytes(), expected_free(device_blocks_.size() * kBlock));
}

TEST_F(FreeRoutes, MemAllocFromPoolAsyncSpillsAndIsFreedInStreamOrder) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuMemPoolCreate(&pool, &props));
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAllocFromPoolAsync(&pointer, kBlock, pool, stream_));
  EXPECT_NO_FATAL_FAILURE(expect_spilled(pointer));
  EXPECT_NO_FATAL_FAILURE(write_and_check(pointer, kBlock, 0x0badf00du, stream_));
  EXPECT_CU(cuMemFreeAsync(pointer, stream_));
  EXPECT_CU(cuStreamSynchronize(stream_));
  EXPECT_CU(cuMemPoolDestroy(pool));
  EXPECT_EQ(free_bytes(), expected_free(device_blocks_.size() * kBlock));
}

// What the driver says about a spilled block's extent must be the block, not the pinned region
// of the host pool it was cut from: programs find an allocation's base and size this way
// (cuMemGetAddressRange, RANGE_START_ADDR / RANGE_SIZE), e.g. before cuIpcGetMemHandle or to
// register memory with NCCL. Managed spills are allocations of their own; for host-pool blocks
// the shim corrects the driver's answer (hooks/pointer_hooks.cpp).
TEST_F(FreeRoutes, AddressRangeOfSpilledBlockIsTheBlock) {
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc(&pointer, kBlock));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(pointer));
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_CU(cuMemGetAddressRange(&base, &size, pointer + kBlock / 2));
  EXPECT_EQ(base, pointer);
  EXPECT_EQ(size, kBlock);
  CUdeviceptr start = 0;
  size_t range = 0;
  EXPECT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, pointer + 8));
  EXPECT_CU(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, pointer + 8));
  EXPECT_EQ(start, pointer);
  EXPECT_EQ(range, kBlock);
  EXPECT_CU(cuMemFree(pointer));
}

// The per-thread exports, as cudart built with --default-stream per-thread calls them: stream 0
// is the calling thread's default stream.
TEST_F(FreeRoutes, PerThreadStreamOrderedRoutes) {
  CUdeviceptr from_async = 0;
  ASSERT_CU(per_thread_.alloc_async(&from_async, kBlock, nullptr));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(from_async));
  ASSERT_NO_FATAL_FAILURE(write_and_check(from_async, kBlock, 0x600d600du, CU_STREAM_PER_THREAD));

  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&pool, device_));
  CUdeviceptr from_pool = 0;
  ASSERT_CU(per_thread_.alloc_from_pool_async(&from_pool, kBlock, pool, nullptr));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(from_pool));
  ASSERT_NO_FATAL_FAILURE(write_and_check(from_pool, kBlock, 0x7e7e7e7eu, CU_STREAM_PER_THREAD));

  // A spilled cuMemAlloc block freed through the per-thread export, too.
  CUdeviceptr plain = 0;
  ASSERT_CU(cuMemAlloc(&plain, kBlock));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(plain));

  ASSERT_CU(fill(from_async, 3, kWords, CU_STREAM_PER_THREAD));
  ASSERT_CU(per_thread_.free_async(from_async, nullptr));
  ASSERT_CU(per_thread_.free_async(from_pool, nullptr));
  ASSERT_CU(per_thread_.free_async(plain, nullptr));
  ASSERT_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  EXPECT_EQ(free_bytes(), expected_free(device_blocks_.size() * kBlock));
}

// cuMemFreeAsync of a spilled block must not give its bytes away before the work queued ahead
// of it in the stream has run, nor make the calling thread wait for that work (Note
// [Stream-ordered frees of managed spills]). The stream is held shut by a gate while a kernel
// that writes block A and A's cuMemFreeAsync wait behind it; then block B is spilled and written
// from the host. Were A's bytes reused at once, B would be (or overlap) A and the kernel would
// overwrite B when the gate opens. A free that waits for the stream instead is a failure: the
// watchdog opens the gate for it after 500 ms.
void FreeRoutes::free_async_is_ordered(CUstream stream, bool stream_ordered_allocation,
                                       bool per_thread_free) {
  CUdeviceptr first = 0;
  if (stream_ordered_allocation) {
    ASSERT_CU(cuMemAllocAsync(&first, kBlock, stream));
  } else {
    ASSERT_CU(cuMemAlloc(&first, kBlock));
  }
  ASSERT_NO_FATAL_FAILURE(expect_spilled(first));

  // A hang guard only: a free that waited for its stream would hold this thread until the
  // watchdog opens the gate, and the test fails then; a short one fails a slow machine too.
  Gate gate;
  std::thread watchdog([&gate] {
    std::unique_lock lock(gate.mutex);
    if (!gate.changed.wait_for(lock, std::chrono::seconds(30), [&] { return gate.open; })) {
      lock.unlock();
      gate.release(/*by_watchdog=*/true);
    }
  });
  EXPECT_CU(cuLaunchHostFunc(stream, &Gate::wait, &gate));
  EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_NOT_READY) << "the gate does not hold the stream";
  EXPECT_CU(fill(first, 0xdeaddeadu, kWords, stream));
  if (per_thread_free) {
    EXPECT_CU(per_thread_.free_async(first, nullptr));
  } else {
    EXPECT_CU(cuMemFreeAsync(first, stream));
  }

  EXPECT_FALSE(gate.opened_by_watchdog)
      << "cuMemFreeAsync blocked the calling thread until its stream drained";

  CUdeviceptr second = 0;
  EXPECT_CU(cuMemAlloc(&second, kBlock));
  EXPECT_NO_FATAL_FAILURE(expect_spilled(second));
  if (!gate.opened_by_watchdog) {
    EXPECT_TRUE(second + kBlock <= first || first + kBlock <= second)
        << "the new block overlaps the one whose free still waits in the stream";
  }
  // Written on a stream of its own: a synchronous copy would queue on the legacy default
  // stream, which waits for the (blocking) per-thread default stream, and so for the gate.
  std::vector<uint32_t> host(kWords);
  for (size_t j = 0; j < kWords; ++j) host[j] = pattern(77, j);
  CUstream writer = nullptr;
  EXPECT_CU(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING));
  EXPECT_CU(cuMemcpyHtoDAsync(second, host.data(), kBlock, writer));
  EXPECT_CU(cuStreamSynchronize(writer));
  EXPECT_CU(cuStreamDestroy(writer));

  gate.release();
  watchdog.join();
  ASSERT_CU(cuStreamSynchronize(stream));
  expect_holds(second, host);
  EXPECT_CU(cuMemFree(second));
  EXPECT_EQ(free_bytes(), expected_free(device_blocks_.size() * kBlock));
}

// cuMemFree of a spilled block waits for the device's work, as the driver's free does: a kernel
// queued before it that writes the block must not reach a block allocated after it. The stream
// is held by a gate; another thread frees A and then allocates and writes B (which the tier may
// cut from A's bytes). Whether the free waits or not, the gate opens after 200 ms at most; a free
// that did not wait has let B be written by then, and the kernel then overwrites it.
TEST_F(FreeRoutes, MemFreeWaitsForQueuedWork) {
  CUdeviceptr first = 0;
  ASSERT_CU(cuMemAlloc(&first, kBlock));
  ASSERT_NO_FATAL_FAILURE(expect_spilled(first));
  Gate gate;
  ASSERT_CU(cuLaunchHostFunc(stream_, &Gate::wait, &gate));
  ASSERT_CU(fill(first, 0xdeaddeadu, kWords, stream_));

  std::vector<uint32_t> host(kWords);
  for (size_t j = 0; j < kWords; ++j) host[j] = pattern(78, j);
  CUdeviceptr second = 0;
  std::atomic<bool> written{false};
  std::thread other([&] {
    EXPECT_CU(cuCtxSetCurrent(context_));
    EXPECT_CU(cuMemFree(first));
    EXPECT_CU(cuMemAlloc(&second, kBlock));
    CUstream writer = nullptr;
    EXPECT_CU(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING));
    EXPECT_CU(cuMemcpyHtoDAsync(second, host.data(), kBlock, writer));
    EXPECT_CU(cuStreamSynchronize(writer));
    EXPECT_CU(cuStreamDestroy(writer));
    written.store(true);
  });
  for (int i = 0; i < 200 && !written.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  gate.release();
  other.join();
  ASSERT_CU(cuStreamSynchronize(stream_));
  expect_holds(second, host);
  EXPECT_CU(cuMemFree(second));
}

TEST_F(FreeRoutes, MemFreeAsyncWaitsForQueuedWork) {
  free_async_is_ordered(stream_, /*stream_ordered_allocation=*/false, /*per_thread_free=*/false);
}
TEST_F(FreeRoutes, MemFreeAsyncOfStreamOrderedSpillWaitsForQueuedWork) {
  free_async_is_ordered(stream_, /*stream_ordered_allocation=*/true, /*per_thread_free=*/false);
}
TEST_F(FreeRoutes, PerThreadMemFreeAsyncWaitsForQueuedWork) {
  free_async_is_ordered(CU_STREAM_PER_THREAD, /*stream_ordered_allocation=*/false,
                        /*per_thread_free=*/true);
}

}  // namespace
