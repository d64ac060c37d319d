// Device linear memory, pinned host memory and pointer attributes on simcuda (1 GiB default), and
// what destroying a context, or resetting the primary one, does to the memory allocated in it.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
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
  // A range that holds an earlier registration whole overlaps it too, though neither of its ends
  // is in it.
  ASSERT_CU(cuMemHostRegister(buffer.data() + 4096, 4096, 0));
  EXPECT_EQ(cuMemHostRegister(buffer.data(), buffer.size(), 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_CU(cuMemHostUnregister(buffer.data() + 4096));
  // Read-only registration needs READ_ONLY_HOST_REGISTER_SUPPORTED, which simcuda does not set.
  EXPECT_EQ(cuMemHostRegister(buffer.data(), buffer.size(), CU_MEMHOSTREGISTER_READ_ONLY),
            CUDA_ERROR_NOT_SUPPORTED);
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

// cuCtxDestroy frees the memory allocated in the context, as the driver documents: the VRAM comes
// back exactly, and the old pointers are unknown (CUDA_ERROR_INVALID_VALUE, as for any pointer
// that is no live allocation), never followed to the destroyed context. Stream-ordered and VMM
// allocations are not associated with a context: they survive it, now in the primary context.
TEST_F(MemoryTest, DestroyingAContextFreesItsMemory) {
  const size_t before = used();
  CUcontext other = nullptr;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, device_));
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  CUdeviceptr device = 0, pitched = 0, managed = 0, pool_block = 0, pool_freed = 0;
  size_t pitch = 0;
  void* pinned = nullptr;
  void* pinned_portable = nullptr;
  std::vector<unsigned char> registered(8192, 7);
  ASSERT_CU(cuMemAlloc(&device, 3 * kMiB + 1));
  ASSERT_CU(cuMemAllocPitch(&pitched, &pitch, 1000, 100, 4));
  ASSERT_CU(cuMemHostAlloc(&pinned, 64 * 1024, 0));
  ASSERT_CU(cuMemHostAlloc(&pinned_portable, 4096, CU_MEMHOSTALLOC_PORTABLE));
  ASSERT_CU(cuMemHostRegister(registered.data(), registered.size(), 0));
  ASSERT_CU(cuMemAllocManaged(&managed, 4 * kMiB, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemPrefetchAsync(managed, 4 * kMiB, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, stream));
  ASSERT_CU(cuMemAllocAsync(&pool_block, kMiB, stream));
  ASSERT_CU(cuMemAllocAsync(&pool_freed, 5 * kMiB, stream));
  ASSERT_CU(cuMemFreeAsync(pool_freed, stream));  // freed on a stream that dies with the context
  // Queued work runs before the memory goes: the context is synchronised first.
  ASSERT_CU(cuMemsetD8Async(device, 1, 3 * kMiB + 1, stream));
  ASSERT_CU(cuMemsetD32Async(pool_block, 2, kMiB / 4, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  const size_t charged = used() - before;
  EXPECT_GE(charged, 3 * kMiB + 4 * kMiB + 2 * kMiB);  // device, resident managed, a pool block

  // A VMM mapping made while `other` is current outlives it.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUdeviceptr reserved = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, 2 * kMiB, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&handle, 2 * kMiB, &prop, 0));
  ASSERT_CU(cuMemMap(reserved, 2 * kMiB, 0, handle, 0));
  const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                               CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_CU(cuMemSetAccess(reserved, 2 * kMiB, &access, 1));
  CUcontext owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, reserved));
  EXPECT_EQ(owner, other);

  ASSERT_CU(cuCtxDestroy(other));  // also pops it: the primary context is current again
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  ASSERT_EQ(current, context_);
  // Everything is back but the VMM handle and the pool chunk of the live pool block (32 MiB);
  // the range freed on the context's stream is free in that chunk (destroying synchronises).
  EXPECT_EQ(used(), before + 2 * kMiB + 32 * kMiB);

  EXPECT_EQ(cuMemFree(device), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(pitched), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(managed), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(pool_freed), CUDA_ERROR_INVALID_VALUE);  // freed before: a double free
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(pinned_portable), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostUnregister(registered.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(cuMemGetAddressRange(&base, &size, device), CUDA_ERROR_NOT_FOUND);
  std::vector<unsigned char> host(16);
  EXPECT_EQ(cuMemcpyDtoH(host.data(), device, host.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(registered[100], 7);  // a registered range is only unregistered: it stays the program's

  // The pool block and the VMM mapping now belong to the primary context and still work.
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, pool_block));
  EXPECT_EQ(owner, context_);
  EXPECT_EQ(download<uint32_t>(pool_block, 4), std::vector<uint32_t>(4, 2u));
  ASSERT_CU(cuMemFree(pool_block));
  ASSERT_CU(cuCtxSynchronize());  // the pool gives its idle chunk back at a release point
  EXPECT_EQ(used(), before + 2 * kMiB);
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, reserved));
  EXPECT_EQ(owner, context_);
  upload(reserved, std::vector<uint32_t>(4, 9u));
  EXPECT_EQ(download<uint32_t>(reserved, 4), std::vector<uint32_t>(4, 9u));
  ASSERT_CU(cuMemUnmap(reserved, 2 * kMiB));
  ASSERT_CU(cuMemRelease(handle));
  ASSERT_CU(cuMemAddressFree(reserved, 2 * kMiB));
  EXPECT_EQ(used(), before);

  // The VRAM is usable again, and the default pool serves the primary context.
  CUdeviceptr again = 0;
  ASSERT_CU(cuMemAlloc(&again, kGiB - before));
  ASSERT_CU(cuMemFree(again));
  ASSERT_CU(cuMemAllocAsync(&again, 5 * kMiB, nullptr));
  ASSERT_CU(cuMemFreeAsync(again, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(used(), before);
}

// cuDevicePrimaryCtxReset destroys all allocations and resets all state of the primary context
// (cuda.h), as cuCtxDestroy does a created one's, but the context stays: still retained, its
// handle current and usable, empty (Note [Resetting a primary context] in core/context.cpp).
// cuda.h, cuCtxDestroy: a context current to other threads "will remain current to those threads,
// and attempting to access ctx from those threads will result in the error
// CUDA_ERROR_CONTEXT_IS_DESTROYED". Such a thread can still move to another context.
TEST_F(MemoryTest, AContextDestroyedWhileCurrentOnAnotherThreadIsDestroyedThere) {
  CUcontext other = nullptr;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, device_));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  struct {  // what the other thread was told, in turn
    CUresult made_current = CUDA_ERROR_UNKNOWN, allocated = CUDA_ERROR_UNKNOWN;
    CUcontext still_current = nullptr;
    CUresult moved_on = CUDA_ERROR_UNKNOWN, allocated_after = CUDA_ERROR_UNKNOWN;
  } told;
  bool destroyed_meanwhile = false;
  std::mutex step;
  std::condition_variable changed;
  std::thread user([&] {
    told.made_current = cuCtxSetCurrent(other);
    std::unique_lock lock(step);
    changed.notify_all();
    changed.wait(lock, [&] { return destroyed_meanwhile; });
    CUdeviceptr pointer = 0;
    told.allocated = cuMemAlloc(&pointer, kMiB);
    cuCtxGetCurrent(&told.still_current);
    told.moved_on = cuCtxSetCurrent(context_);
    told.allocated_after = cuMemAlloc(&pointer, kMiB);
    if (told.allocated_after == CUDA_SUCCESS) cuMemFree(pointer);
  });
  {
    std::unique_lock lock(step);
    changed.wait(lock, [&] { return told.made_current != CUDA_ERROR_UNKNOWN; });
  }
  ASSERT_CU(cuCtxDestroy(other));
  {
    const std::lock_guard lock(step);
    destroyed_meanwhile = true;
  }
  changed.notify_all();
  user.join();
  ASSERT_EQ(told.made_current, CUDA_SUCCESS);
  EXPECT_EQ(told.allocated, CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(told.still_current, other);
  EXPECT_EQ(told.moved_on, CUDA_SUCCESS);
  EXPECT_EQ(told.allocated_after, CUDA_SUCCESS);
}

TEST_F(MemoryTest, ResettingThePrimaryContextFreesItsMemoryAndKeepsIt) {
  const size_t before = used();
  CUstream stream = nullptr;
  CUevent event = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuEventCreate(&event, CU_EVENT_DEFAULT));
  CUdeviceptr device = 0, managed = 0;
  void* pinned = nullptr;
  ASSERT_CU(cuMemAlloc(&device, 3 * kMiB));
  ASSERT_CU(cuMemAllocManaged(&managed, 4 * kMiB, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemPrefetchAsync(managed, 4 * kMiB, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, stream));
  ASSERT_CU(cuMemHostAlloc(&pinned, 64 * 1024, CU_MEMHOSTALLOC_PORTABLE));
  ASSERT_CU(cuMemsetD8Async(device, 1, 3 * kMiB, stream));
  ASSERT_CU(cuEventRecord(event, stream));
  EXPECT_GT(used(), before);

  ASSERT_CU(cuDevicePrimaryCtxReset(device_));
  EXPECT_EQ(used(), before);
  EXPECT_EQ(cuMemFree(device), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(managed), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamQuery(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(event), CUDA_ERROR_INVALID_HANDLE);

  unsigned int flags = 0;
  int active = 0;
  ASSERT_CU(cuDevicePrimaryCtxGetState(device_, &flags, &active));
  EXPECT_EQ(active, 1) << "a reset does not release the context";
  CUcontext current = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(current, context_);
  CUdeviceptr again = 0;
  ASSERT_CU(cuMemAlloc(&again, kMiB));
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuMemsetD8Async(again, 2, kMiB, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_EQ(download(again, 1)[0], 2);
  ASSERT_CU(cuStreamDestroy(stream));
  ASSERT_CU(cuMemFree(again));
  EXPECT_EQ(used(), before);
}

// "The context is automatically reset once the last reference to it is released" (cuda.h): a
// release that leaves a reference keeps everything; the last one frees the memory allocated in
// the context, and a retain after it finds the same handle, empty.
TEST_F(MemoryTest, TheLastReleaseOfThePrimaryContextResetsIt) {
  const size_t before = used();
  CUdeviceptr kept = 0;
  ASSERT_CU(cuMemAlloc(&kept, 3 * kMiB));
  CUcontext second = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&second, device_));
  ASSERT_CU(cuDevicePrimaryCtxRelease(device_));
  EXPECT_EQ(used(), before + 3 * kMiB) << "a reference is left, so nothing is reset";
  CUcontext owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, kept));

  ASSERT_CU(cuDevicePrimaryCtxRelease(device_));
  unsigned int flags = 0;
  int active = 1;
  ASSERT_CU(cuDevicePrimaryCtxGetState(device_, &flags, &active));
  EXPECT_EQ(active, 0);
  CUcontext again = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&again, device_));  // released by TearDown
  EXPECT_EQ(again, context_);
  EXPECT_EQ(used(), before);
  EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, kept),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(kept), CUDA_ERROR_INVALID_VALUE);
}

// The 32-bit ABI of CUDA 2.0 (cuMemAlloc, cuMemAllocPitch, cuMemFree at version 2000): simcuda has
// no device address that fits 32 bits, so it places no legacy allocation (Note [Legacy
// allocations have no 32-bit address] in src/api/legacy_memory.cpp), after the usual checks.
TEST_F(MemoryTest, LegacyAllocationsHaveNo32BitAddress) {
  using LegacyAlloc = CUresult(CUDAAPI*)(unsigned int*, unsigned int);
  using LegacyAllocPitch = CUresult(CUDAAPI*)(unsigned int*, unsigned int*, unsigned int,
                                              unsigned int, unsigned int);
  using LegacyFree = CUresult(CUDAAPI*)(unsigned int);
  void* alloc = nullptr;
  void* alloc_pitch = nullptr;
  void* free = nullptr;
  ASSERT_CU(cuGetProcAddress("cuMemAlloc", &alloc, 2000, 0, nullptr));
  ASSERT_CU(cuGetProcAddress("cuMemAllocPitch", &alloc_pitch, 2000, 0, nullptr));
  ASSERT_CU(cuGetProcAddress("cuMemFree", &free, 2000, 0, nullptr));
  const auto legacy_alloc = reinterpret_cast<LegacyAlloc>(alloc);
  const auto legacy_alloc_pitch = reinterpret_cast<LegacyAllocPitch>(alloc_pitch);
  const auto legacy_free = reinterpret_cast<LegacyFree>(free);

  const size_t before = used();
  unsigned int pointer = 0x5a5a;
  unsigned int pitch = 0x5a5a;
  EXPECT_EQ(legacy_alloc(&pointer, kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(legacy_alloc_pitch(&pointer, &pitch, 1024, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(pointer, 0x5a5au);  // nothing truncated is handed out
  EXPECT_EQ(pitch, 0x5a5au);
  EXPECT_EQ(used(), before);
  EXPECT_EQ(legacy_alloc(nullptr, kMiB), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(legacy_alloc(&pointer, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(legacy_alloc_pitch(&pointer, nullptr, 1024, 1024, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(legacy_alloc_pitch(&pointer, &pitch, 1024, 1024, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(legacy_free(0));
  EXPECT_EQ(legacy_free(0x10000), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(legacy_alloc(&pointer, kMiB), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
}

}  // namespace
