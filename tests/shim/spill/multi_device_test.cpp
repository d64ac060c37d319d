// Several devices in one process (SIMCUDA_DEVICES=4, CMakeLists.txt): each device has its own
// budget; an allocation spills for the device that asked; stream-ordered requests charge the
// stream's or the pool's device, whatever context is current (Note [The device a request
// charges] in shim/hooks/devices.h); a block freed by another thread, with another device
// current, goes back to its own device's budget; and a spilled block is reachable from a peer
// device's kernels and copies, with no peer access enabled (simcuda faults a kernel that touches
// another device's memory without it).
#include <array>
#include <thread>
#include <vector>

#include "spill_support.h"

namespace {

using spill::kBlock;
using spill::Tier;
using spill::tier_of;

constexpr int kDevices = 4;
constexpr size_t kWords = kBlock / sizeof(uint32_t);

class MultiDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(routes::shim_is_loaded()) << "libvramspill.so is not preloaded";
    ASSERT_CU(cuInit(0));
    int count = 0;
    ASSERT_CU(cuDeviceGetCount(&count));
    ASSERT_EQ(count, kDevices) << "SIMCUDA_DEVICES is not " << kDevices;
    for (int device = 0; device < kDevices; ++device) {
      ASSERT_CU(cuDevicePrimaryCtxRetain(&contexts_[device], device));
      use(device);
      ASSERT_CU(cuModuleLoadData(&modules_[device], "simcuda accepts any image"));
      ASSERT_CU(cuModuleGetFunction(&fills_[device], modules_[device], "vs_fill_u32"));
      ASSERT_CU(cuStreamCreate(&streams_[device], CU_STREAM_NON_BLOCKING));
      size_t free = 0;
      ASSERT_CU(cuMemGetInfo(&free, &budget_));
      ASSERT_EQ(free, budget_) << "device " << device << ": a test leaked device memory";
    }
    use(0);
  }

  void TearDown() override {
    for (int device = 0; device < kDevices; ++device) {
      if (contexts_[device] == nullptr) continue;
      use(device);
      free_held(device);  // what a failed test left behind, so the next one starts clean
      if (streams_[device] != nullptr) {
        EXPECT_CU(cuStreamDestroy(streams_[device]));
      }
      if (modules_[device] != nullptr) {
        EXPECT_CU(cuModuleUnload(modules_[device]));
      }
      EXPECT_CU(cuDevicePrimaryCtxRelease(device));
    }
  }

  void use(int device) const { ASSERT_CU(cuCtxSetCurrent(contexts_[device])); }

  // cuMemGetInfo's free figure on `device`, leaving the current context as it was.
  size_t free_on(int device) const {
    size_t free = 0;
    size_t total = 0;
    EXPECT_CU(cuCtxPushCurrent(contexts_[device]));
    EXPECT_CU(cuMemGetInfo(&free, &total));
    CUcontext popped = nullptr;
    EXPECT_CU(cuCtxPopCurrent(&popped));
    EXPECT_EQ(total, budget_);
    return free;
  }

  // Fills `device`'s budget with cuMemAlloc blocks, each checked to be on the device; with
  // `device` current afterwards.
  void fill(int device) {
    use(device);
    for (size_t i = 0; i < budget_ / kBlock; ++i) {
      CUdeviceptr pointer = 0;
      ASSERT_CU(cuMemAlloc(&pointer, kBlock));
      held_[device].push_back(pointer);
      ASSERT_EQ(tier_of(pointer), Tier::kDevice) << "block " << i;
    }
  }

  // Frees what fill(`device`) took, with `device` current.
  void free_held(int device) {
    use(device);
    for (const CUdeviceptr pointer : held_[device]) EXPECT_CU(cuMemFree(pointer));
    held_[device].clear();
  }

  CUresult launch_fill(int device, CUdeviceptr dst, uint32_t value, uint64_t count) const {
    void* params[] = {&dst, &value, &count};
    return cuLaunchKernel(fills_[device], 64, 1, 1, 256, 1, 1, 0, streams_[device], params,
                          nullptr);
  }

  // The first word of `pointer`'s kWords that is not `value`, or kWords.
  static size_t first_mismatch(CUdeviceptr pointer, uint32_t value) {
    std::vector<uint32_t> words(kWords);
    EXPECT_CU(cuMemcpyDtoH(words.data(), pointer, kBlock));
    for (size_t j = 0; j < kWords; ++j)
      if (words[j] != value) return j;
    return kWords;
  }

  static uint64_t pool_reserved(CUmemoryPool pool) {
    cuuint64_t reserved = 0;
    EXPECT_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    return reserved;
  }

  std::array<CUcontext, kDevices> contexts_{};
  std::array<CUmodule, kDevices> modules_{};
  std::array<CUfunction, kDevices> fills_{};
  std::array<CUstream, kDevices> streams_{};
  std::array<std::vector<CUdeviceptr>, kDevices> held_;
  size_t budget_ = 0;
};

TEST_F(MultiDevice, EachDeviceHasItsOwnBudget) {
  for (int device = 0; device < kDevices; ++device) ASSERT_NO_FATAL_FAILURE(fill(device));
  for (int device = 0; device < kDevices; ++device) EXPECT_EQ(free_on(device), 0u) << device;
  // Device 2 is full: its next block spills, and no other device's figure moves.
  use(2);
  CUdeviceptr spilled = 0;
  ASSERT_CU(cuMemAlloc(&spilled, kBlock));
  EXPECT_EQ(tier_of(spilled), spill::expected_tier());
  for (int device = 0; device < kDevices; ++device) EXPECT_EQ(free_on(device), 0u) << device;
  EXPECT_CU(cuMemFree(spilled));
  for (int device = 0; device < kDevices; ++device) {
    free_held(device);
    EXPECT_EQ(free_on(device), budget_) << device;
  }
}

// ManagedAdvice (advice_test.cpp) on device 0, here on another one: the advice names the device
// that asked.
TEST_F(MultiDevice, ManagedSpillIsAdvisedForItsDevice) {
  ASSERT_EQ(spill::expected_tier(), Tier::kManaged);
  ASSERT_NO_FATAL_FAILURE(fill(2));
  CUdeviceptr spilled = 0;
  ASSERT_CU(cuMemAlloc(&spilled, kBlock));
  ASSERT_EQ(tier_of(spilled), Tier::kManaged);
  std::array<int, kDevices> accessed_by{};
  accessed_by.fill(CU_DEVICE_INVALID);
  ASSERT_CU(cuMemRangeGetAttribute(accessed_by.data(), sizeof accessed_by,
                                   CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, spilled, kBlock));
  EXPECT_EQ(accessed_by[0], 2);
  EXPECT_EQ(accessed_by[1], CU_DEVICE_INVALID);
  EXPECT_CU(cuMemFree(spilled));
  free_held(2);
}

// Device 0 is current and full; the allocation is on device 1's stream, so it is device 1's.
TEST_F(MultiDevice, StreamOrderedAllocationChargesTheStreamsDevice) {
  ASSERT_NO_FATAL_FAILURE(fill(0));
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAllocAsync(&block, kBlock, streams_[1]));
  EXPECT_EQ(tier_of(block), Tier::kDevice) << "charged to the full current device, and spilled";
  CUmemoryPool pool = nullptr;
  ASSERT_CU(cuDeviceGetMemPool(&pool, 1));
  EXPECT_EQ(free_on(1), budget_ - pool_reserved(pool));
  EXPECT_LT(free_on(1), budget_);
  EXPECT_EQ(free_on(0), 0u);
  ASSERT_CU(cuMemFreeAsync(block, streams_[1]));
  use(1);  // a stream is synchronised from its own context
  ASSERT_CU(cuStreamSynchronize(streams_[1]));
  EXPECT_EQ(free_on(1), budget_);
  free_held(0);
}

// The same for pools: one the program created on device 2, and device 3's default pool.
TEST_F(MultiDevice, PoolAllocationChargesThePoolsDevice) {
  ASSERT_NO_FATAL_FAILURE(fill(0));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 2};
  CUmemoryPool created = nullptr;
  ASSERT_CU(cuMemPoolCreate(&created, &props));
  CUmemoryPool default_pool = nullptr;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&default_pool, 3));
  for (const auto& [pool, device] : {std::pair{created, 2}, std::pair{default_pool, 3}}) {
    CUdeviceptr block = 0;
    ASSERT_CU(cuMemAllocFromPoolAsync(&block, kBlock, pool, streams_[device]));
    EXPECT_EQ(tier_of(block), Tier::kDevice) << "device " << device;
    EXPECT_EQ(free_on(device), budget_ - pool_reserved(pool));
    EXPECT_LT(free_on(device), budget_);
    EXPECT_EQ(free_on(0), 0u);
    ASSERT_CU(cuMemFreeAsync(block, streams_[device]));
    use(device);
    ASSERT_CU(cuStreamSynchronize(streams_[device]));
    use(0);
  }
  EXPECT_CU(cuMemPoolDestroy(created));
  EXPECT_EQ(free_on(2), budget_);
  EXPECT_EQ(free_on(3), budget_);
  free_held(0);
}

TEST_F(MultiDevice, FreedOnAnotherThreadWithAnotherDeviceCurrent) {
  use(1);
  CUdeviceptr block = 0;
  ASSERT_CU(cuMemAlloc(&block, 4 * kBlock));
  EXPECT_EQ(free_on(1), budget_ - 4 * kBlock);
  CUresult freed = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    if (cuCtxSetCurrent(contexts_[3]) == CUDA_SUCCESS) freed = cuMemFree(block);
  }).join();
  ASSERT_EQ(freed, CUDA_SUCCESS);
  EXPECT_EQ(free_on(1), budget_);
  EXPECT_EQ(free_on(3), budget_);
}

// A block spilled for a device names that device and its context, as the device allocation it
// stands in for would, though the host pool pinned it in the context of the first device that
// spilled (device 0 here).
TEST_F(MultiDevice, ASpilledBlockNamesTheDeviceItWasAllocatedFor) {
  for (const int device : {0, 2}) ASSERT_NO_FATAL_FAILURE(fill(device));
  CUdeviceptr first = 0;
  use(0);
  ASSERT_CU(cuMemAlloc(&first, kBlock));
  CUdeviceptr second = 0;
  use(2);
  ASSERT_CU(cuMemAlloc(&second, kBlock));
  ASSERT_EQ(tier_of(second), spill::expected_tier());
  int ordinal = -1;
  ASSERT_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, second));
  EXPECT_EQ(ordinal, 2);
  CUcontext context = nullptr;
  CUpointer_attribute asked[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  ordinal = -1;
  void* answers[] = {&context, &ordinal};
  ASSERT_CU(cuPointerGetAttributes(2, asked, answers, second));
  EXPECT_EQ(context, contexts_[2]);
  EXPECT_EQ(ordinal, 2);
  ASSERT_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, first));
  EXPECT_EQ(ordinal, 0);
  EXPECT_CU(cuMemFree(second));
  use(0);
  EXPECT_CU(cuMemFree(first));
  for (const int device : {0, 2}) free_held(device);
}

// A block device 0 spilled, written by a kernel of device 1 and copied to device 1's memory.
TEST_F(MultiDevice, PeerDeviceReachesASpilledBlock) {
  ASSERT_NO_FATAL_FAILURE(fill(0));
  CUdeviceptr spilled = 0;
  ASSERT_CU(cuMemAlloc(&spilled, kBlock));
  ASSERT_EQ(tier_of(spilled), spill::expected_tier());
  use(1);
  constexpr uint32_t kValue = 0x5eed1e55;
  ASSERT_CU(launch_fill(1, spilled, kValue, kWords));
  ASSERT_CU(cuStreamSynchronize(streams_[1]));
  EXPECT_EQ(first_mismatch(spilled, kValue), kWords);
  CUdeviceptr on_peer = 0;
  ASSERT_CU(cuMemAlloc(&on_peer, kBlock));
  ASSERT_CU(cuMemcpyPeer(on_peer, contexts_[1], spilled, contexts_[0], kBlock));
  EXPECT_EQ(first_mismatch(on_peer, kValue), kWords);
  EXPECT_CU(cuMemFree(on_peer));
  use(0);
  EXPECT_CU(cuMemFree(spilled));
  free_held(0);
}

}  // namespace
