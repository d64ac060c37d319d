// Device linear memory, pinned host memory and pointer attributes on simcuda (1 GiB default).
#include <cstring>
#include <vector>

#include "driver_test_support.h"

namespace {

using MemoryTest = DriverTest;
using MemoryDeathTest = DriverTest;

TEST_F(MemoryTest, CapacityIsExactAndOutOfMemoryIsReported) {
  size_t free_before = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  EXPECT_EQ(total, kGiB);
  EXPECT_EQ(free_before, kGiB);

  CUdeviceptr big = 0;
  ASSERT_CU(cuMemAlloc(&big, 768 * kMiB));
  size_t free_after = 0;
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before - 768 * kMiB);

  CUdeviceptr too_much = 0;
  EXPECT_EQ(cuMemAlloc(&too_much, 512 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuMemFree(big));
  ASSERT_CU(cuMemAlloc(&too_much, 512 * kMiB));
  ASSERT_CU(cuMemFree(too_much));
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);
}

TEST_F(MemoryTest, InvalidArgumentsGetTheDriversErrors) {
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuMemAlloc(nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc(&ptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(0x1234), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFree(0));
  size_t value = 0;
  EXPECT_EQ(cuMemGetInfo(nullptr, &value), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemGetInfo(&value, nullptr), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMemAlloc(&ptr, 4096));
  EXPECT_EQ(cuMemFree(ptr + 16), CUDA_ERROR_INVALID_VALUE);  // not the start of the allocation
  ASSERT_CU(cuMemFree(ptr));
  EXPECT_EQ(cuMemFree(ptr), CUDA_ERROR_INVALID_VALUE);  // double free
}

TEST_F(MemoryTest, NoContextMeansInvalidContext) {
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuMemAlloc(&ptr, 4096), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(MemoryTest, PitchedAllocationsReportTheirPitch) {
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&ptr, &pitch, 1000, 10, 4));
  EXPECT_GE(pitch, 1000u);
  EXPECT_EQ(pitch % 512, 0u);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &size, ptr + 5 * pitch));
  EXPECT_EQ(base, ptr);
  EXPECT_EQ(size, pitch * 10);
  ASSERT_CU(cuMemFree(ptr));
}

// On a GPU the CPU cannot dereference a device pointer; simcuda keeps that property.
TEST_F(MemoryDeathTest, HostAccessToDevicePointerCrashesAsOnAGpu) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // stream worker threads are running
  CUdeviceptr ptr = 0;
  ASSERT_CU(cuMemAlloc(&ptr, 4096));
  EXPECT_DEATH({ *reinterpret_cast<volatile int*>(ptr) = 1; }, "");
  ASSERT_CU(cuMemFree(ptr));
}

TEST_F(MemoryTest, PinnedHostMemoryIsHostAndDeviceAddressable) {
  void* host = nullptr;
  ASSERT_CU(cuMemHostAlloc(&host, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP));
  std::memset(host, 0xab, 1 << 20);
  CUdeviceptr device_ptr = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&device_ptr, host, 0));
  EXPECT_EQ(device_ptr, reinterpret_cast<CUdeviceptr>(host));
  unsigned int flags = 0;
  ASSERT_CU(cuMemHostGetFlags(&flags, host));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_MEMHOSTALLOC_DEVICEMAP));
  ASSERT_CU(cuMemFreeHost(host));
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);

  std::vector<char> buffer(1 << 16);
  ASSERT_CU(cuMemHostRegister(buffer.data(), buffer.size(), 0));
  EXPECT_EQ(cuMemHostRegister(buffer.data() + 100, 10, 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_CU(cuMemHostGetDevicePointer(&device_ptr, buffer.data() + 10, 0));
  EXPECT_EQ(device_ptr, reinterpret_cast<CUdeviceptr>(buffer.data() + 10));
  ASSERT_CU(cuMemHostUnregister(buffer.data()));
  EXPECT_EQ(cuMemHostUnregister(buffer.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

TEST_F(MemoryTest, PointerAttributesTellTheTruth) {
  CUdeviceptr device_ptr = 0;
  ASSERT_CU(cuMemAlloc(&device_ptr, 3 * kMiB));
  unsigned int type = 0;
  ASSERT_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, device_ptr + 100));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  int managed = -1;
  ASSERT_CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, device_ptr));
  EXPECT_EQ(managed, 0);
  CUcontext owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, device_ptr));
  EXPECT_EQ(owner, context_);
  CUdeviceptr start = 0;
  ASSERT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, device_ptr + 7));
  EXPECT_EQ(start, device_ptr);
  void* host_pointer = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, device_ptr),
            CUDA_ERROR_INVALID_VALUE);

  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, 4096));
  ASSERT_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(pinned)));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));

  int stack_value = 0;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(&stack_value)),
            CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  unsigned int batch_type = 99;
  int ordinal = 99;
  void* data[] = {&batch_type, &ordinal};
  ASSERT_CU(cuPointerGetAttributes(2, attributes, data, reinterpret_cast<CUdeviceptr>(&stack_value)));
  EXPECT_EQ(batch_type, 0u);
  EXPECT_EQ(ordinal, -2);
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device_ptr));
}

}  // namespace
