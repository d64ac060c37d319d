// NULL and invalid arguments get the driver's own error, under the shim as without it, and never
// a crash: the shim must not dereference what the driver has not checked (shim/README.md,
// "Budgets and honesty": the shim never crashes the program it is in).
//
// Run twice, like budget_routes_test: under the shim (ROUTES_EXPECT=shim) and without it
// (ROUTES_EXPECT=driver). The expected results are simcuda's, hard-coded, and the same in both
// runs. After the bad calls, the budget must be untouched: a refused or failed call holds nothing.
#include "routes_support.h"

namespace {

using routes::check_mode;
using routes::kBudget;
using routes::kDeviceMemory;
using routes::kMiB;
using routes::under_shim;

class InvalidArguments : public routes::PrimaryContextTest<> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(PrimaryContextTest::SetUp());
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }

  void TearDown() override {
    // Whatever the bad calls did, nothing stays held.
    const size_t free = free_bytes();
    EXPECT_EQ(free, under_shim() ? kBudget : kDeviceMemory);
    if (stream_ != nullptr) {
      EXPECT_CU(cuStreamDestroy(stream_));
    }
    PrimaryContextTest::TearDown();
  }

  CUstream stream_ = nullptr;
};

// An address no allocation has: freeing it is the driver's INVALID_VALUE.
constexpr CUdeviceptr kGarbagePointer = 0x1234;

TEST_F(InvalidArguments, NullOutputPointers) {
  EXPECT_EQ(cuMemAlloc(nullptr, kMiB), CUDA_ERROR_INVALID_VALUE);
  // Over the budget too: the driver's argument check comes before any budget.
  EXPECT_EQ(cuMemAlloc(nullptr, 512 * kMiB), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(nullptr, kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocAsync(nullptr, kMiB, stream_), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr pointer = 0;
  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch(&pointer, nullptr, 1024, 16, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(nullptr, &pitch, 1024, 16, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(&pointer, nullptr, 512 * kMiB / 1024, 1024, 4),
            CUDA_ERROR_INVALID_VALUE);

  size_t value = 0;
  EXPECT_EQ(cuMemGetInfo(nullptr, &value), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetInfo(&value, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetInfo(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
  EXPECT_EQ(cuMemCreate(nullptr, 2 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);

  CUDA_ARRAY_DESCRIPTOR descriptor{};
  descriptor.Width = 64;
  descriptor.Height = 64;
  descriptor.Format = CU_AD_FORMAT_FLOAT;
  descriptor.NumChannels = 1;
  EXPECT_EQ(cuArrayCreate(nullptr, &descriptor), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(InvalidArguments, NullDescriptionsAndPools) {
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, 2 * kMiB, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  CUarray array = nullptr;
  EXPECT_EQ(cuArrayCreate(&array, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuArray3DCreate(&array, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&pointer, kMiB, nullptr, stream_), CUDA_ERROR_INVALID_VALUE);
  // A garbage pool: looked up by the driver, not followed by the shim.
  int not_a_pool = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&pointer, kMiB, reinterpret_cast<CUmemoryPool>(&not_a_pool),
                                    stream_),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(InvalidArguments, GarbageFrees) {
  EXPECT_EQ(cuMemFree(kGarbagePointer), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(kGarbagePointer, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFree(0));  // freeing NULL is a no-op
  EXPECT_EQ(cuMemRelease(0x5678), CUDA_ERROR_INVALID_VALUE);
  int not_an_array = 0;
  EXPECT_EQ(cuArrayDestroy(reinterpret_cast<CUarray>(&not_an_array)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuArrayDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);

  // Double frees: the first forgets the allocation, the second is the driver's error.
  CUdeviceptr pointer = 0;
  ASSERT_CU(cuMemAlloc(&pointer, kMiB));
  ASSERT_CU(cuMemFree(pointer));
  EXPECT_EQ(cuMemFree(pointer), CUDA_ERROR_INVALID_VALUE);
  CUDA_ARRAY_DESCRIPTOR descriptor{};
  descriptor.Width = 64;
  descriptor.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  descriptor.NumChannels = 4;
  CUarray array = nullptr;
  ASSERT_CU(cuArrayCreate(&array, &descriptor));
  ASSERT_CU(cuArrayDestroy(array));
  EXPECT_EQ(cuArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(InvalidArguments, BadSizesAndDescriptors) {
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc(&pointer, 0), CUDA_ERROR_INVALID_VALUE);
  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch(&pointer, &pitch, 1024, 16, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(&pointer, &pitch, 0, 16, 4), CUDA_ERROR_INVALID_VALUE);
  // A padded pitch x height past 2^64 must not wrap around to a small block (here to 2 KiB).
  pointer = 0;
  pitch = 0;
  EXPECT_EQ(cuMemAllocPitch(&pointer, &pitch, (size_t{1} << 62) + 512, 4, 4),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(pointer, 0u);
  EXPECT_EQ(pitch, 0u);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);  // not a granule
  // Over the budget too (Note [A refused cuMemCreate that was invalid] in
  // shim/placement/vmm_spill.h): the shim refused it with CUDA_ERROR_OUT_OF_MEMORY.
  EXPECT_EQ(cuMemCreate(&handle, kBudget + kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  EXPECT_EQ(cuMemCreate(&handle, kBudget + 2 * kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  EXPECT_EQ(cuMemCreate(&handle, kBudget + 2 * kMiB, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  prop.location.id = 7;  // no such device
  EXPECT_EQ(cuMemCreate(&handle, 2 * kMiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);

  CUDA_ARRAY_DESCRIPTOR descriptor{};
  descriptor.Width = 0;
  descriptor.Height = 64;
  descriptor.Format = CU_AD_FORMAT_FLOAT;
  descriptor.NumChannels = 1;
  CUarray array = nullptr;
  EXPECT_EQ(cuArrayCreate(&array, &descriptor), CUDA_ERROR_INVALID_VALUE);
  descriptor.Width = 64;
  descriptor.NumChannels = 3;
  EXPECT_EQ(cuArrayCreate(&array, &descriptor), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(InvalidArguments, NoCurrentContext) {
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc(&pointer, kMiB), CUDA_ERROR_INVALID_CONTEXT);
  size_t free = 0;
  size_t total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context()));
}

}  // namespace
