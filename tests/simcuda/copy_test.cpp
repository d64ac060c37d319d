// Copies and memsets on simcuda: byte-exact results, pitched layouts, pointer checks, and the
// driver's pageable/pinned host-memory rules for asynchronous copies.
#include <cstring>
#include <numeric>
#include <vector>

#include "driver_test_support.h"
#include "stream_test_support.h"

namespace {

using CopyTest = DriverTest;

std::vector<unsigned char> pattern(size_t bytes, unsigned seed) {
  std::vector<unsigned char> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 31 + seed);
  return data;
}

// Offsets into allocations and sizes that are not multiples of 4; the bytes around the copied
// range must stay as they were.
TEST_F(CopyTest, RoundTripsAreByteExact) {
  constexpr size_t kSpan = 2 * kMiB;
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kSpan));
  ASSERT_CU(cuMemAlloc(&b, kSpan));
  for (size_t bytes : {size_t{1}, size_t{3}, size_t{4097}, kMiB + 7}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{13}}) {
      ASSERT_CU(cuMemsetD8(a, 0xEE, kSpan));
      ASSERT_CU(cuMemsetD8(b, 0xDD, kSpan));
      const std::vector<unsigned char> data = pattern(bytes, static_cast<unsigned>(offset));
      ASSERT_CU(cuMemcpyHtoD(a + offset, data.data(), bytes));
      ASSERT_CU(cuMemcpyDtoD(b + 2 * offset + 1, a + offset, bytes));
      std::vector<unsigned char> back(bytes + 2);
      ASSERT_CU(cuMemcpyDtoH(back.data(), b + 2 * offset, bytes + 2));
      EXPECT_EQ(back.front(), 0xDD);
      EXPECT_EQ(back.back(), 0xDD);
      EXPECT_EQ(std::memcmp(back.data() + 1, data.data(), bytes), 0) << bytes << "@" << offset;
    }
  }
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
}

TEST_F(CopyTest, AsyncAndUnifiedCopiesRoundTrip) {
  constexpr size_t kBytes = 12345;
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  ASSERT_CU(cuMemAlloc(&b, kBytes));
  void* pinned_in = nullptr;
  void* pinned_out = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned_in, kBytes, 0));
  ASSERT_CU(cuMemHostAlloc(&pinned_out, kBytes, 0));
  const std::vector<unsigned char> data = pattern(kBytes, 7);
  std::memcpy(pinned_in, data.data(), kBytes);

  ASSERT_CU(cuMemcpyHtoDAsync(a, pinned_in, kBytes, stream));
  ASSERT_CU(cuMemcpyDtoDAsync(b, a, kBytes, stream));
  ASSERT_CU(cuMemcpyDtoHAsync(pinned_out, b, kBytes, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_EQ(std::memcmp(pinned_out, data.data(), kBytes), 0);

  // cuMemcpy tells the direction from the pointers (unified addressing).
  std::vector<unsigned char> host(kBytes, 0);
  ASSERT_CU(cuMemsetD8(a, 0, kBytes));
  ASSERT_CU(cuMemcpy(a, reinterpret_cast<CUdeviceptr>(data.data()), kBytes));
  ASSERT_CU(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(host.data()), a, kBytes, stream));
  EXPECT_EQ(host, data);  // into pageable memory: complete when the call returns
  ASSERT_CU(cuMemcpyPeer(b, context_, a, context_, kBytes));
  EXPECT_EQ(download(b, kBytes), data);

  ASSERT_CU(cuMemFreeHost(pinned_in));
  ASSERT_CU(cuMemFreeHost(pinned_out));
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
  ASSERT_CU(cuStreamDestroy(stream));
}

// A pinned source is read when the copy runs, so overwriting it first is a race the program
// loses, as on a GPU; a pageable source is staged at the call. The gate makes both outcomes
// certain.
TEST_F(CopyTest, PinnedSourceRaceIsVisibleAndPageableSourceIsStaged) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr from_pinned = 0, from_pageable = 0;
  ASSERT_CU(cuMemAlloc(&from_pinned, 64));
  ASSERT_CU(cuMemAlloc(&from_pageable, 64));
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, 64));
  std::vector<unsigned char> pageable(64, 1);
  std::memset(pinned, 1, 64);
  {
    Gate gate;
    ASSERT_CU(gate.block(stream));
    ASSERT_CU(cuMemcpyHtoDAsync(from_pinned, pinned, 64, stream));
    ASSERT_CU(cuMemcpyHtoDAsync(from_pageable, pageable.data(), 64, stream));
    std::memset(pinned, 2, 64);
    std::fill(pageable.begin(), pageable.end(), 2);
    gate.open();
    ASSERT_CU(cuStreamSynchronize(stream));
  }
  EXPECT_EQ(download(from_pinned, 64), std::vector<unsigned char>(64, 2));
  EXPECT_EQ(download(from_pageable, 64), std::vector<unsigned char>(64, 1));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(from_pinned));
  ASSERT_CU(cuMemFree(from_pageable));
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(CopyTest, PitchedCopiesMoveOnlyTheRegion) {
  constexpr size_t kWidth = 37, kHeight = 5, kHostPitch = 50;
  CUdeviceptr device = 0;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&device, &pitch, kWidth + 3, kHeight, 4));
  ASSERT_CU(cuMemsetD8(device, 0xAB, pitch * kHeight));
  const std::vector<unsigned char> source = pattern(kHostPitch * kHeight, 3);

  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = source.data();
  up.srcPitch = kHostPitch;
  up.srcXInBytes = 2;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = device;
  up.dstPitch = pitch;
  up.dstXInBytes = 1;
  up.WidthInBytes = kWidth;
  up.Height = kHeight;
  ASSERT_CU(cuMemcpy2D(&up));

  std::vector<unsigned char> rows = download(device, pitch * kHeight);
  for (size_t y = 0; y < kHeight; ++y) {
    EXPECT_EQ(rows[y * pitch], 0xAB);
    EXPECT_EQ(std::memcmp(&rows[y * pitch + 1], &source[y * kHostPitch + 2], kWidth), 0) << y;
    EXPECT_EQ(rows[y * pitch + 1 + kWidth], 0xAB);
  }

  std::vector<unsigned char> back(kWidth * kHeight, 0);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  down.srcDevice = device;
  down.srcPitch = pitch;
  down.srcXInBytes = 1;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = back.data();
  down.dstPitch = kWidth;
  down.WidthInBytes = kWidth;
  down.Height = kHeight;
  ASSERT_CU(cuMemcpy2DAsync(&down, nullptr));
  ASSERT_CU(cuStreamSynchronize(nullptr));
  for (size_t y = 0; y < kHeight; ++y)
    EXPECT_EQ(std::memcmp(&back[y * kWidth], &source[y * kHostPitch + 2], kWidth), 0) << y;

  down.dstPitch = kWidth - 1;  // rows would overlap
  EXPECT_EQ(cuMemcpy2D(&down), CUDA_ERROR_INVALID_VALUE);
  down.dstPitch = kWidth;
  down.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(cuMemcpy2D(&down), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcPitch = SIZE_MAX / 2;  // the region's extent overflows
  down.Height = 3;
  EXPECT_EQ(cuMemcpy2D(&down), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFree(device));
}

TEST_F(CopyTest, MemsetsAreExact) {
  constexpr size_t kBytes = 1024;
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, kBytes));
  ASSERT_CU(cuMemsetD8(device, 0, kBytes));
  ASSERT_CU(cuMemsetD8(device + 3, 0x5A, 7));
  ASSERT_CU(cuMemsetD16(device + 10, 0x1234, 3));
  ASSERT_CU(cuMemsetD32Async(device + 20, 0xA1B2C3D4u, 5, nullptr));
  ASSERT_CU(cuMemsetD2D8(device + 100, 16, 0x77, 5, 3));
  ASSERT_CU(cuMemsetD2D32Async(device + 200, 12, 0x01020304u, 2, 2, nullptr));
  std::vector<unsigned char> expected(kBytes, 0);
  std::fill_n(expected.begin() + 3, 7, 0x5A);
  for (size_t i = 0; i < 3; ++i) std::memcpy(&expected[10 + 2 * i], "\x34\x12", 2);
  for (size_t i = 0; i < 5; ++i) std::memcpy(&expected[20 + 4 * i], "\xD4\xC3\xB2\xA1", 4);
  for (size_t row = 0; row < 3; ++row) std::fill_n(expected.begin() + 100 + 16 * row, 5, 0x77);
  for (size_t row = 0; row < 2; ++row)
    for (size_t i = 0; i < 2; ++i)
      std::memcpy(&expected[200 + 12 * row + 4 * i], "\x04\x03\x02\x01", 4);
  EXPECT_EQ(download(device, kBytes), expected);

  EXPECT_EQ(cuMemsetD16(device + 1, 0, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned
  EXPECT_EQ(cuMemsetD32(device + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD32(device, 0, kBytes / 4 + 1), CUDA_ERROR_INVALID_VALUE);  // past the end
  EXPECT_EQ(cuMemsetD2D16(device, 3, 0, 2, 2), CUDA_ERROR_INVALID_VALUE);       // pitch < width
  EXPECT_EQ(cuMemsetD8(0, 0, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD32(device, 0, SIZE_MAX / 2), CUDA_ERROR_INVALID_VALUE);  // bytes overflow
  EXPECT_CU(cuMemsetD8(device, 0, 0));
  ASSERT_CU(cuMemFree(device));
}

TEST_F(CopyTest, PointersOutsideLiveAllocationsAreRefused) {
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 4096));
  std::vector<unsigned char> host(8192);
  EXPECT_EQ(cuMemcpyHtoD(0x1234, host.data(), 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(device, nullptr, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(device + 4095, host.data(), 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(host.data(), device, 8192), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD(device, device + 4096, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoDAsync(device, ~CUdeviceptr{0} - 1, 4, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoDAsync(device, host.data(), 4, reinterpret_cast<CUstream>(uintptr_t{8})),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_CU(cuMemcpyHtoD(device, nullptr, 0));  // nothing to copy
  ASSERT_CU(cuMemFree(device));
  EXPECT_EQ(cuMemcpyHtoD(device, host.data(), 4), CUDA_ERROR_INVALID_VALUE);  // freed
}

// A copy into reserved but unmapped virtual addresses is refused at the call; it must not reach
// the worker thread, which would fault.
TEST_F(CopyTest, UnmappedVmmRangeIsRefused) {
  CUdeviceptr reserved = 0;
  const CUresult reserve = cuMemAddressReserve(&reserved, 2 * kMiB, 0, 0, 0);
  if (reserve == CUDA_ERROR_NOT_SUPPORTED) GTEST_SKIP() << "VMM not available in this build";
  ASSERT_CU(reserve);
  std::vector<unsigned char> host(64, 1);
  EXPECT_EQ(cuMemcpyHtoD(reserved, host.data(), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8Async(reserved, 0, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(host.data(), reserved + 4096, 64), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemAddressFree(reserved, 2 * kMiB));
}

// Copies run guarded (a fault on device memory poisons the context, see vmm_test.cpp), but a bad
// host pointer, which neither the driver nor simcuda can check, still crashes the process, as the
// driver's own CPU-side copy of pageable memory would.
TEST_F(CopyTest, GarbageHostPointerStillCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // stream worker threads are running
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 4096));
  EXPECT_DEATH(cuMemcpyHtoD(device, reinterpret_cast<const void*>(uintptr_t{0x1000}), 64), "");
  EXPECT_DEATH(cuMemcpyDtoH(reinterpret_cast<void*>(uintptr_t{0x1000}), device, 64), "");
  ASSERT_CU(cuMemFree(device));
}

TEST_F(CopyTest, PerThreadCopyExportsUseThePerThreadStream) {
  const auto copy_pt = PER_THREAD(cuMemcpyHtoDAsync);
  const auto sync_copy_pt = PER_THREAD(cuMemcpyDtoH);
  const auto memset_pt = PER_THREAD(cuMemsetD32);
  const auto launch_pt = PER_THREAD(cuLaunchHostFunc);
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 16));
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, 16));
  std::memset(pinned, 3, 16);
  {
    Gate gate;
    ASSERT_CU(gate.block(nullptr, launch_pt));
    ASSERT_CU(memset_pt(device, 0, 4));
    ASSERT_CU(copy_pt(device, pinned, 16, nullptr));  // behind the gate on this thread's stream
    std::memset(pinned, 4, 16);
    gate.open();
    std::vector<unsigned char> back(16);
    ASSERT_CU(sync_copy_pt(back.data(), device, 16));  // same stream: after the copy
    EXPECT_EQ(back, std::vector<unsigned char>(16, 4));
  }
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(device));
}

}  // namespace
