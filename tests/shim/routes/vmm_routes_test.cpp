// VMM memory counts against the budget from cuMemCreate until the driver frees it: at the last
// cuMemRelease or the last cuMemUnmap, whichever comes later (Note [VMM memory lives until its
// last mapping goes] in shim/core/vmm_tracker.h). Run under the shim (256 MiB budget, spilling
// off) and without it, on simcuda's 1 GiB device.
#include "routes_support.h"

namespace {

using routes::kBudget;
using routes::kDeviceMemory;
using routes::kMiB;
using routes::under_shim;

class VmmRoutes : public routes::PrimaryContextTest<> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(PrimaryContextTest<>::SetUp());
    ASSERT_CU(cuMemAddressReserve(&base_, kReserved, 0, 0, 0));
    ASSERT_EQ(free_bytes(), under_shim() ? kBudget : kDeviceMemory) << "a test leaked memory";
  }

  void TearDown() override {
    if (base_ != 0) {
      EXPECT_CU(cuMemAddressFree(base_, kReserved));
    }
    PrimaryContextTest<>::TearDown();
  }

  CUmemGenericAllocationHandle create(size_t bytes) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
    CUmemGenericAllocationHandle handle = 0;
    EXPECT_CU(cuMemCreate(&handle, bytes, &prop, 0));
    return handle;
  }

  void map(size_t offset, size_t bytes, CUmemGenericAllocationHandle handle) {
    ASSERT_CU(cuMemMap(base_ + offset, bytes, 0, handle, 0));
    CUmemAccessDesc access{};
    access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_CU(cuMemSetAccess(base_ + offset, bytes, &access, 1));
  }

  // What cuMemGetInfo must report as free with `held` bytes of VMM memory alive.
  static size_t expected_free(size_t held) {
    return under_shim() ? kBudget - held : kDeviceMemory - held;
  }

  // Whether a `bytes` cuMemAlloc fits now (it is freed again at once).
  static bool plain_allocation_fits(size_t bytes) {
    CUdeviceptr pointer = 0;
    const CUresult result = cuMemAlloc(&pointer, bytes);
    if (result == CUDA_SUCCESS) {
      EXPECT_CU(cuMemFree(pointer));
    }
    EXPECT_TRUE(result == CUDA_SUCCESS || result == CUDA_ERROR_OUT_OF_MEMORY) << result;
    return result == CUDA_SUCCESS;
  }

  static constexpr size_t kReserved = 512 * kMiB;
  CUdeviceptr base_ = 0;
};

// Create, map, release at once (PyTorch's expandable segments): the memory stays taken, and
// counted, until it is unmapped.
TEST_F(VmmRoutes, MappedMemoryStaysCountedAfterRelease) {
  const CUmemGenericAllocationHandle handle = create(200 * kMiB);
  ASSERT_NO_FATAL_FAILURE(map(0, 200 * kMiB, handle));
  ASSERT_CU(cuMemRelease(handle));
  EXPECT_EQ(free_bytes(), expected_free(200 * kMiB));
  EXPECT_EQ(plain_allocation_fits(100 * kMiB), !under_shim());
  ASSERT_CU(cuMemUnmap(base_, 200 * kMiB));
  EXPECT_EQ(free_bytes(), expected_free(0));
  EXPECT_TRUE(plain_allocation_fits(100 * kMiB));
}

// Unmapped first, released later: the release frees it.
TEST_F(VmmRoutes, UnmapThenReleaseFreesAtTheRelease) {
  const CUmemGenericAllocationHandle handle = create(100 * kMiB);
  ASSERT_NO_FATAL_FAILURE(map(0, 100 * kMiB, handle));
  ASSERT_CU(cuMemUnmap(base_, 100 * kMiB));
  EXPECT_EQ(free_bytes(), expected_free(100 * kMiB));
  ASSERT_CU(cuMemRelease(handle));
  EXPECT_EQ(free_bytes(), expected_free(0));
}

// cuMemRetainAllocationHandle takes a reference that needs a release of its own.
TEST_F(VmmRoutes, RetainedHandleNeedsItsOwnRelease) {
  const CUmemGenericAllocationHandle handle = create(100 * kMiB);
  ASSERT_NO_FATAL_FAILURE(map(0, 100 * kMiB, handle));
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base_)));
  EXPECT_EQ(retained, handle);
  ASSERT_CU(cuMemUnmap(base_, 100 * kMiB));
  ASSERT_CU(cuMemRelease(handle));
  EXPECT_EQ(free_bytes(), expected_free(100 * kMiB));
  ASSERT_CU(cuMemRelease(retained));
  EXPECT_EQ(free_bytes(), expected_free(0));
}

// One handle mapped twice, two handles side by side, one unmap over everything.
TEST_F(VmmRoutes, OneUnmapFreesEveryReleasedHandleInItsRange) {
  const CUmemGenericAllocationHandle first = create(64 * kMiB);
  const CUmemGenericAllocationHandle second = create(32 * kMiB);
  ASSERT_NO_FATAL_FAILURE(map(0, 64 * kMiB, first));
  ASSERT_NO_FATAL_FAILURE(map(64 * kMiB, 32 * kMiB, second));
  ASSERT_NO_FATAL_FAILURE(map(128 * kMiB, 64 * kMiB, first));
  ASSERT_CU(cuMemRelease(first));
  ASSERT_CU(cuMemRelease(second));
  ASSERT_CU(cuMemUnmap(base_, 96 * kMiB));
  EXPECT_EQ(free_bytes(), expected_free(64 * kMiB));  // `first` is still mapped at +128 MiB
  ASSERT_CU(cuMemUnmap(base_ + 128 * kMiB, 64 * kMiB));
  EXPECT_EQ(free_bytes(), expected_free(0));
}

// The driver refuses a release of a handle that is not one: nothing changes in the budget.
TEST_F(VmmRoutes, RefusedCallsChangeNothing) {
  const CUmemGenericAllocationHandle handle = create(64 * kMiB);
  ASSERT_NO_FATAL_FAILURE(map(0, 64 * kMiB, handle));
  EXPECT_NE(cuMemRelease(handle + 12345), CUDA_SUCCESS);
  ASSERT_CU(cuMemRelease(handle));
  EXPECT_NE(cuMemUnmap(base_ + 2 * kMiB, 2 * kMiB), CUDA_SUCCESS);  // not a whole mapping
  EXPECT_EQ(free_bytes(), expected_free(64 * kMiB));
  ASSERT_CU(cuMemUnmap(base_, 64 * kMiB));
  EXPECT_EQ(free_bytes(), expected_free(0));
}

}  // namespace
