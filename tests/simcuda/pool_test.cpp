// Stream-ordered allocation on simcuda (1 GiB device): chunks and the ranges cut from them,
// reuse in stream order and across streams, release at synchronisation, attributes, created
// pools, exact VRAM accounting (Note [Pool chunks] in tools/simcuda/src/core/memory_pool.h).
//
// A stream is held at a point by a host function that waits for a gate (Gate, in
// stream_test_support.h), so that a free queued behind it has provably not run yet.
#include <cstdlib>
#include <limits>
#include <vector>

#include "kernel_test_support.h"
#include "stream_test_support.h"

namespace {

constexpr size_t kChunk = 32 * kMiB;  // what a pool reserves for a request up to that size

class PoolTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    ASSERT_CU(cuStreamCreate(&s1_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(&s2_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuDeviceGetDefaultMemPool(&pool_, device_));
    reset_default_pool();
  }
  // The default pool outlives each test when they share a process: leave it as found.
  void TearDown() override {
    reset_default_pool();
    cuStreamDestroy(s1_);
    cuStreamDestroy(s2_);
    KernelFixture::TearDown();
  }

  static cuuint64_t attribute(CUmemoryPool pool, CUmemPool_attribute which) {
    cuuint64_t value = 0;
    EXPECT_CU(cuMemPoolGetAttribute(pool, which, &value));
    return value;
  }
  void reset_default_pool() {
    cuuint64_t zero = 0;
    EXPECT_CU(cuCtxSynchronize());
    EXPECT_CU(cuDeviceSetMemPool(device_, pool_));
    EXPECT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero));
    EXPECT_CU(cuMemPoolTrimTo(pool_, 0));
    EXPECT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    EXPECT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  }
  void keep_everything() {
    cuuint64_t keep = std::numeric_limits<cuuint64_t>::max();
    ASSERT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  }

  CUstream s1_ = nullptr, s2_ = nullptr;
  CUmemoryPool pool_ = nullptr;
};

TEST_F(PoolTest, TheDefaultPoolIsCurrentWithTheDriversDefaults) {
  CUmemoryPool current = nullptr;
  ASSERT_CU(cuDeviceGetMemPool(&current, device_));
  EXPECT_EQ(current, pool_);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0u);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  for (CUmemPool_attribute flag :
       {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
        CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES}) {
    int value = 0;
    ASSERT_CU(cuMemPoolGetAttribute(pool_, flag, &value));
    EXPECT_EQ(value, 1) << flag;
  }
  EXPECT_EQ(cuMemPoolDestroy(pool_), CUDA_ERROR_INVALID_VALUE);  // the default stays
}

TEST_F(PoolTest, ChunksAreReservedAndCountedExactly) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, 3 * kMiB, s1_));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 3 * kMiB);
  EXPECT_EQ(used(), kChunk);
  CUmemoryPool owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, block + 100));
  EXPECT_EQ(owner, pool_);

  ASSERT_CU(fill(block, 0x5150u, 3 * kMiB / 4, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  EXPECT_EQ(download<uint32_t>(block, 3 * kMiB / 4), std::vector<uint32_t>(3 * kMiB / 4, 0x5150u));
  ASSERT_CU(cuMemFreeAsync(block, s1_));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 3 * kMiB);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), kChunk);
}

// A request no device can hold is refused, even once a chunk exists that rounding it up to
// 512 bytes would have wrapped round into (it did: SIZE_MAX got a 32 MiB chunk).
TEST_F(PoolTest, ARequestLargerThanAnyDeviceIsOutOfMemory) {
  CUdeviceptr first = 0;
  ASSERT_CU(cuMemAllocAsync(&first, kMiB, s1_));
  for (const size_t size : {SIZE_MAX, SIZE_MAX - 100, size_t{1} << 62}) {
    CUdeviceptr block = 0;
    EXPECT_EQ(cuMemAllocAsync(&block, size, s1_), CUDA_ERROR_OUT_OF_MEMORY) << size;
    EXPECT_EQ(cuMemAlloc(&block, size), CUDA_ERROR_OUT_OF_MEMORY) << size;
  }
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  ASSERT_CU(cuMemFreeAsync(first, s1_));
}

TEST_F(PoolTest, FreeThenAllocOnTheSameStreamReusesTheBlock) {
  CUdeviceptr first = 0, second = 0, elsewhere = 0;
  ASSERT_CU(cuMemAllocAsync(&first, 8 * kMiB, s1_));
  Gate gate;
  EXPECT_CU(gate.block(s1_));
  ASSERT_CU(cuMemFreeAsync(first, s1_));  // not reached yet: s1 is held
  ASSERT_CU(cuMemAllocAsync(&second, 8 * kMiB, s1_));
  EXPECT_EQ(second, first);  // stream order makes it safe
  ASSERT_CU(cuMemFreeAsync(second, s1_));
  ASSERT_CU(cuMemAllocAsync(&elsewhere, 8 * kMiB, s2_));
  EXPECT_NE(elsewhere, first);  // another stream must not touch it before the free ran
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);  // one chunk, split
  gate.open();
  EXPECT_CU(cuStreamSynchronize(s1_));
  ASSERT_CU(cuMemFreeAsync(elsewhere, s2_));
}

TEST_F(PoolTest, AFreeThatRanIsReusedByAnyStream) {
  keep_everything();
  CUdeviceptr first = 0, second = 0;
  ASSERT_CU(cuMemAllocAsync(&first, 4 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(first, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  ASSERT_CU(cuMemAllocAsync(&second, 4 * kMiB, s2_));
  EXPECT_EQ(second, first);
  ASSERT_CU(cuMemFreeAsync(second, s2_));
}

TEST_F(PoolTest, WhenVramIsShortAnotherStreamWaitsForAPendingFree) {
  keep_everything();
  CUdeviceptr first = 0, second = 0;
  ASSERT_CU(cuMemAllocAsync(&first, 600 * kMiB, s1_));
  Gate gate;
  EXPECT_CU(gate.block(s1_));
  ASSERT_CU(cuMemFreeAsync(first, s1_));
  ASSERT_CU(cuMemAllocAsync(&second, 600 * kMiB, s2_));  // no room for a second block
  EXPECT_EQ(second, first);
  ASSERT_CU(fill(second, 7u, 16, s2_));
  EXPECT_EQ(cuStreamQuery(s2_), CUDA_ERROR_NOT_READY);  // s2 now waits for s1's free
  gate.open();
  EXPECT_CU(cuStreamSynchronize(s1_));
  ASSERT_CU(cuStreamSynchronize(s2_));
  EXPECT_EQ(download<uint32_t>(second, 16), std::vector<uint32_t>(16, 7u));
  EXPECT_EQ(used(), 600 * kMiB);
  ASSERT_CU(cuMemFreeAsync(second, s2_));
}

TEST_F(PoolTest, OutOfMemoryFirstReleasesIdleBlocks) {
  keep_everything();
  CUdeviceptr small = 0, large = 0, impossible = 0;
  ASSERT_CU(cuMemAllocAsync(&small, 600 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(small, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 600 * kMiB);
  ASSERT_CU(cuMemAllocAsync(&large, 800 * kMiB, s1_));  // the idle 600 MiB block is given back
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 800 * kMiB);
  EXPECT_EQ(used(), 800 * kMiB);
  EXPECT_EQ(cuMemAllocAsync(&impossible, 300 * kMiB, s1_), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuMemFreeAsync(large, s1_));
}

TEST_F(PoolTest, SynchronisationGivesBackMemoryAboveTheReleaseThreshold) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, 8 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(block, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));  // threshold 0: everything free goes back
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(used(), 0u);

  cuuint64_t threshold = 64 * kMiB;
  ASSERT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  ASSERT_CU(cuMemAllocAsync(&block, 8 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(block, s1_));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  EXPECT_EQ(used(), kChunk);  // idle pool memory still counts against VRAM
  ASSERT_CU(cuMemPoolTrimTo(pool_, 0));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(used(), 0u);
}

// cuda.h, cuMemFree: "This API will not perform any implict synchronization when the pointer was
// allocated with cuMemAllocAsync or cuMemAllocFromPoolAsync. Callers must ensure that all accesses
// to these pointer have completed": the block goes back to its pool at once, and the free is no
// point where the pool gives memory back (a synchronisation is).
TEST_F(PoolTest, CuMemFreeReturnsAPoolBlockAtOnce) {
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, kMiB, s1_));
  ASSERT_CU(fill(block, 1u, 16, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));  // the caller's part (RemapTest checks it is kept)
  ASSERT_CU(cuMemFree(block));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(cuMemFree(block), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(block, s1_), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(PoolTest, WatermarksResetAndCurrentValuesAreReadOnly) {
  keep_everything();
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, 10 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(block, s1_));
  cuuint64_t zero = 0, one = 1;
  ASSERT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0u);
  ASSERT_CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), kChunk);
  EXPECT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemPoolTrimTo(pool_, 0));
}

TEST_F(PoolTest, CreatedPoolsServeAllocationsAndOutliveDestruction) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool created = nullptr;
  ASSERT_CU(cuMemPoolCreate(&created, &props));
  CUdeviceptr from_pool = 0, from_current = 0;
  ASSERT_CU(cuMemAllocFromPoolAsync(&from_pool, 2 * kMiB, created, s1_));
  CUmemoryPool owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, from_pool));
  EXPECT_EQ(owner, created);

  ASSERT_CU(cuDeviceSetMemPool(device_, created));
  ASSERT_CU(cuMemAllocAsync(&from_current, 2 * kMiB, s1_));
  EXPECT_EQ(attribute(created, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 4 * kMiB);
  ASSERT_CU(cuMemFreeAsync(from_current, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));

  ASSERT_CU(cuMemPoolDestroy(created));  // gives back the idle block; one is still out
  CUmemoryPool current = nullptr;
  ASSERT_CU(cuDeviceGetMemPool(&current, device_));
  EXPECT_EQ(current, pool_);
  cuuint64_t value = 0;
  EXPECT_EQ(cuMemPoolGetAttribute(created, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(used(), kChunk);  // the chunk that still holds from_pool
  ASSERT_CU(cuMemFree(from_pool));
  ASSERT_CU(cuCtxSynchronize());  // a destroyed pool's last chunk goes back at a release point
  EXPECT_EQ(used(), 0u);

  props.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cuMemPoolCreate(&created, &props), CUDA_ERROR_NOT_SUPPORTED);
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 5};
  EXPECT_EQ(cuMemPoolCreate(&created, &props), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(PoolTest, SmallRequestsShareAChunkAtTheDriversAlignment) {
  CUdeviceptr tiny = 0, small = 0;
  ASSERT_CU(cuMemAllocAsync(&tiny, 12, s1_));
  ASSERT_CU(cuMemAllocAsync(&small, 1000, s1_));
  EXPECT_EQ(small, tiny + 512);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 512u + 1024u);
  // Each range answers pointer queries as an allocation of its own.
  CUdeviceptr start = 0;
  size_t size = 0;
  ASSERT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, small + 10));
  ASSERT_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, small + 10));
  EXPECT_EQ(start, small);
  EXPECT_EQ(size, 1000u);
  ASSERT_CU(cuMemGetAddressRange(&start, &size, tiny + 4));
  EXPECT_EQ(start, tiny);
  EXPECT_EQ(size, 12u);
  ASSERT_CU(fill(small, 9u, 250, s1_));
  ASSERT_CU(fill(tiny, 4u, 3, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  EXPECT_EQ(download<uint32_t>(small, 250), std::vector<uint32_t>(250, 9u));
  ASSERT_CU(cuMemFreeAsync(tiny, s1_));
  ASSERT_CU(cuMemFreeAsync(small, s1_));
}

TEST_F(PoolTest, FreedNeighboursCoalesceIntoOneRange) {
  keep_everything();
  CUdeviceptr first = 0, second = 0, rest = 0, both = 0;
  ASSERT_CU(cuMemAllocAsync(&first, 4 * kMiB, s1_));
  ASSERT_CU(cuMemAllocAsync(&second, 4 * kMiB, s1_));
  ASSERT_CU(cuMemAllocAsync(&rest, kChunk - 8 * kMiB, s1_));  // the chunk is full
  EXPECT_EQ(second, first + 4 * kMiB);
  ASSERT_CU(cuMemFreeAsync(first, s1_));
  ASSERT_CU(cuMemFreeAsync(second, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  ASSERT_CU(cuMemAllocAsync(&both, 8 * kMiB, s2_));  // fits only in the two freed ranges
  EXPECT_EQ(both, first);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  ASSERT_CU(cuMemFreeAsync(both, s2_));
  ASSERT_CU(cuMemFreeAsync(rest, s1_));
}

// One large block freed and synchronised, then many small requests: the scenario the shim's
// pool budget must follow.
TEST_F(PoolTest, AKeptLargeChunkIsSplitForSmallRequests) {
  keep_everything();
  CUdeviceptr large = 0;
  ASSERT_CU(cuMemAllocAsync(&large, 192 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(large, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 192 * kMiB);
  std::vector<CUdeviceptr> small(48);
  for (CUdeviceptr& block : small) {
    ASSERT_CU(cuMemAllocAsync(&block, 4 * kMiB, s2_));
    EXPECT_GE(block, large);
    EXPECT_LT(block, large + 192 * kMiB);
  }
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 192 * kMiB);
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 192 * kMiB);
  EXPECT_EQ(used(), 192 * kMiB);
  for (CUdeviceptr block : small) ASSERT_CU(cuMemFreeAsync(block, s2_));
}

TEST_F(PoolTest, AReleasedLargeChunkLeavesSmallRequestsToReserveNewChunks) {
  CUdeviceptr large = 0;
  ASSERT_CU(cuMemAllocAsync(&large, 192 * kMiB, s1_));
  ASSERT_CU(cuMemFreeAsync(large, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));  // threshold 0: the whole chunk goes back
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  std::vector<CUdeviceptr> small(48);
  for (size_t i = 0; i < small.size(); ++i) {
    ASSERT_CU(cuMemAllocAsync(&small[i], 4 * kMiB, s2_));
    // Eight requests fill a chunk; the ninth reserves the next.
    EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), (i / 8 + 1) * kChunk) << i;
  }
  EXPECT_EQ(used(), 192 * kMiB);
  for (CUdeviceptr block : small) ASSERT_CU(cuMemFreeAsync(block, s2_));
}

TEST_F(PoolTest, ReservationsNeverExceedVram) {
  size_t total = 0;
  ASSERT_CU(cuDeviceTotalMem(&total, device_));
  std::vector<CUdeviceptr> blocks;
  CUdeviceptr block = 0;
  CUresult result = CUDA_SUCCESS;
  while ((result = cuMemAllocAsync(&block, 4 * kMiB, s1_)) == CUDA_SUCCESS) blocks.push_back(block);
  EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
  const cuuint64_t reserved = attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  EXPECT_LE(reserved, total);
  EXPECT_EQ(reserved, used());
  EXPECT_GT(blocks.size() * 4 * kMiB, total - kChunk);  // chunks packed full
  for (CUdeviceptr each : blocks) ASSERT_CU(cuMemFreeAsync(each, s1_));
}

TEST_F(PoolTest, WhenVramIsShortAChunkShrinksToTheRequest) {
  CUdeviceptr large = 0, small = 0;
  ASSERT_CU(cuMemAllocAsync(&large, 1000 * kMiB, s1_));  // 24 MiB of VRAM left
  ASSERT_CU(cuMemAllocAsync(&small, 3 * kMiB, s1_));
  EXPECT_EQ(attribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1004 * kMiB);
  ASSERT_CU(cuMemFreeAsync(small, s1_));
  ASSERT_CU(cuMemFreeAsync(large, s1_));
}

TEST_F(PoolTest, MaxSizeCapsTheReservation) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  props.maxSize = 64 * kMiB;
  CUmemoryPool capped = nullptr;
  ASSERT_CU(cuMemPoolCreate(&capped, &props));
  CUdeviceptr large = 0, medium = 0, over = 0;
  ASSERT_CU(cuMemAllocFromPoolAsync(&large, 40 * kMiB, capped, s1_));
  ASSERT_CU(cuMemAllocFromPoolAsync(&medium, 20 * kMiB, capped, s1_));  // no room for 32 MiB
  EXPECT_EQ(attribute(capped, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 60 * kMiB);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&over, 8 * kMiB, capped, s1_), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuMemFreeAsync(large, s1_));
  ASSERT_CU(cuMemFreeAsync(medium, s1_));
  ASSERT_CU(cuStreamSynchronize(s1_));
  ASSERT_CU(cuMemPoolDestroy(capped));
  EXPECT_EQ(used(), 0u);
}

TEST_F(PoolTest, PerThreadExportsUseThePerThreadStream) {
  using AllocAsync = CUresult(CUDAAPI*)(CUdeviceptr*, size_t, CUstream);
  using FreeAsync = CUresult(CUDAAPI*)(CUdeviceptr, CUstream);
  AllocAsync alloc_ptsz = nullptr;
  FreeAsync free_ptsz = nullptr;
  ASSERT_CU(cuGetProcAddress("cuMemAllocAsync", reinterpret_cast<void**>(&alloc_ptsz), 11020,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  ASSERT_CU(cuGetProcAddress("cuMemFreeAsync", reinterpret_cast<void**>(&free_ptsz), 11020,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  CUdeviceptr first = 0, second = 0;
  ASSERT_CU(alloc_ptsz(&first, kMiB, nullptr));
  ASSERT_CU(free_ptsz(first, nullptr));
  ASSERT_CU(alloc_ptsz(&second, kMiB, CU_STREAM_PER_THREAD));  // the same stream: reused
  EXPECT_EQ(second, first);
  ASSERT_CU(free_ptsz(second, nullptr));
}

TEST(PoolSupportDeathTest, DevicesWithoutPoolsRefuseStreamOrderedAllocation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const CUdevice device = init_child_with_attributes("MEMORY_POOLS_SUPPORTED=0", 100);
        CUdeviceptr block = 0;
        CUmemoryPool pool = nullptr;
        const bool refused = cuMemAllocAsync(&block, 4096, nullptr) == CUDA_ERROR_NOT_SUPPORTED &&
                             cuDeviceGetDefaultMemPool(&pool, device) == CUDA_ERROR_NOT_SUPPORTED;
        std::exit(refused ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
