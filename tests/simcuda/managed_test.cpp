// Managed memory on simcuda: residency that follows kernels and host accesses byte-exactly, VRAM
// accounting of device-resident pages, oversubscription with LRU eviction, advice and prefetch.
//
// Each of the two devices has 64 MiB (set before cuInit) so that twice its VRAM stays small. Which
// pages are resident is observed through cuMemGetInfo and through the modeled time of a kernel
// touching one 2 MiB page (cuEventElapsedTime): a resident page costs the launch and HBM time (~4
// us), a migrated one the link transfer plus a fault (~60 us).
#include <cudaTypedefs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernel_test_support.h"
#include "stream_test_support.h"

namespace {

[[maybe_unused]] const int kSmallDevices =
    setenv("SIMCUDA_VRAM", "64MiB", 1) + setenv("SIMCUDA_DEVICES", "2", 1);

constexpr size_t kPage = 2 * kMiB;
constexpr size_t kVram = 64 * kMiB;
constexpr size_t kWordsPerPage = kPage / 4;
constexpr float kResidentMs = 0.010f;  // well above a resident touch, well below a migration

class ManagedTest : public KernelFixture {
 protected:
  void SetUp() override {
    KernelFixture::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    if (stream_ != nullptr) cuStreamDestroy(stream_);
    KernelFixture::TearDown();
  }

  // Modeled milliseconds of one fill of the 2 MiB page at `page`.
  float fill_page_ms(CUdeviceptr page, uint32_t value) {
    return modeled_ms([&] { EXPECT_CU(fill(page, value, kWordsPerPage, stream_)); });
  }

  // Fills `words` words at `at` with `value` from a kernel of device 1, in its primary context;
  // what device 1 then holds (used(), in its view).
  uint64_t fill_on_device_1(CUdeviceptr at, uint32_t value, uint64_t words) {
    CUcontext other = nullptr;
    CUmodule module = nullptr;
    CUfunction fill_on_other = nullptr;
    EXPECT_CU(cuDevicePrimaryCtxRetain(&other, 1));
    EXPECT_CU(cuCtxPushCurrent(other));
    EXPECT_CU(cuModuleLoadData(&module, "simcuda accepts any image"));
    EXPECT_CU(cuModuleGetFunction(&fill_on_other, module, "vs_fill_u32"));
    void* params[] = {&at, &value, &words};
    EXPECT_CU(cuLaunchKernel(fill_on_other, 64, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
    EXPECT_CU(cuCtxSynchronize());
    const uint64_t held = used();
    EXPECT_CU(cuModuleUnload(module));
    EXPECT_CU(cuCtxPopCurrent(&other));
    EXPECT_CU(cuDevicePrimaryCtxRelease(1));
    return held;
  }

  // Prefetches `bytes` at `range` (none of it on the device yet) to device 0 on `mover`, and
  // returns once simcuda's worker has run the prefetch, without moving this thread's modeled
  // clock: in modeled time it is still on its way. The device's memory in use tells that it ran
  // (cuMemGetInfo waits for nothing).
  void prefetch_to_device_and_let_it_run(CUdeviceptr range, uint64_t bytes, CUstream mover) {
    const size_t before = used();
    ASSERT_CU(cuMemPrefetchAsync(range, bytes, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, mover));
    while (used() < before + bytes) std::this_thread::yield();
  }

  // Modeled milliseconds of the work `queue` queues on stream_.
  template <typename Queue>
  float modeled_ms(Queue queue) {
    CUevent start = nullptr, end = nullptr;
    EXPECT_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
    EXPECT_CU(cuEventCreate(&end, CU_EVENT_DEFAULT));
    EXPECT_CU(cuEventRecord(start, stream_));
    queue();
    EXPECT_CU(cuEventRecord(end, stream_));
    EXPECT_CU(cuEventSynchronize(end));
    float ms = -1;
    EXPECT_CU(cuEventElapsedTime(&ms, start, end));
    cuEventDestroy(start);
    cuEventDestroy(end);
    return ms;
  }

  CUstream stream_ = nullptr;
};

template <typename T>
std::vector<T> host_copy(CUdeviceptr managed, size_t count) {
  const auto* data = reinterpret_cast<const T*>(managed);
  return std::vector<T>(data, data + count);
}

TEST_F(ManagedTest, PagesStartOnTheHostAndChargeVramOnlyWhenOnTheDevice) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, 5 * kMiB, CU_MEM_ATTACH_GLOBAL));
  EXPECT_EQ(used(), 0u);
  int is_managed = 0;
  ASSERT_CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, managed));
  EXPECT_EQ(is_managed, 1);
  std::memset(reinterpret_cast<void*>(managed), 0x11, 5 * kMiB);  // host view is accessible
  EXPECT_EQ(used(), 0u);

  ASSERT_CU(fill(managed, 7, 5 * kMiB / 4, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 5 * kMiB);  // three pages: 2 + 2 + 1 MiB, exactly
  ASSERT_CU(cuMemFree(managed));
  EXPECT_EQ(used(), 0u);
}

TEST_F(ManagedTest, DataSurvivesMigrationBothWaysByteExact) {
  constexpr size_t n = 3 * kWordsPerPage;  // three pages of floats
  CUdeviceptr x = 0, y = 0;
  ASSERT_CU(cuMemAllocManaged(&x, n * 4, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemAllocManaged(&y, n * 4, CU_MEM_ATTACH_HOST));
  auto* xs = reinterpret_cast<float*>(x);
  auto* ys = reinterpret_cast<float*>(y);
  for (size_t i = 0; i < n; ++i) {
    xs[i] = static_cast<float>(i % 1000);
    ys[i] = 1.0f;
  }
  ASSERT_CU(axpy(y, x, 2.0f, n, stream_));  // y = 2x + 1, on the device
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 2 * n * 4);

  // The host reads y: every page of y faults back, x stays on the device.
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(ys[i], 2.0f * static_cast<float>(i % 1000) + 1.0f) << i;
  EXPECT_EQ(used(), n * 4);

  // The host writes x while it is on the device; the kernel then sees the new values.
  for (size_t i = 0; i < n; ++i) xs[i] = -static_cast<float>(i % 7);
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(copy(y, x, n * 4, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(host_copy<float>(y, n), host_copy<float>(x, n));

  // Copies read managed memory wherever it is.
  std::vector<float> downloaded(n);
  ASSERT_CU(cuMemcpyDtoH(downloaded.data(), y, n * 4));
  EXPECT_EQ(downloaded, host_copy<float>(x, n));
  ASSERT_CU(cuMemFree(x));
  ASSERT_CU(cuMemFree(y));
  EXPECT_EQ(used(), 0u);
}

TEST_F(ManagedTest, TwiceVramOversubscribedEvictsLeastRecentlyUsedFirst) {
  constexpr size_t pages = 2 * kVram / kPage;
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, pages * kPage, CU_MEM_ATTACH_GLOBAL));
  auto page = [&](size_t i) { return managed + i * kPage; };

  for (size_t i = 0; i < pages / 2; ++i)
    ASSERT_CU(fill(page(i), uint32_t(i), kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kVram);  // VRAM is now full of managed pages 0..31

  EXPECT_LT(fill_page_ms(page(0), 0), kResidentMs);    // page 0 is touched: now most recent
  EXPECT_GT(fill_page_ms(page(32), 32), kResidentMs);  // migrates, evicting page 1
  EXPECT_EQ(used(), kVram);
  EXPECT_LT(fill_page_ms(page(0), 0), kResidentMs);  // still resident (FIFO would have lost it)
  EXPECT_GT(fill_page_ms(page(1), 1), kResidentMs);  // was evicted; now evicts page 2
  EXPECT_LT(fill_page_ms(page(3), 3), kResidentMs);
  EXPECT_GT(fill_page_ms(page(2), 2), kResidentMs);

  // The rest of the range runs through the device, evicting as it goes.
  for (size_t i = 33; i < pages; ++i) ASSERT_CU(fill(page(i), uint32_t(i), kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kVram);
  for (size_t i = 0; i < pages; ++i) {
    const auto* words = reinterpret_cast<const uint32_t*>(page(i));
    ASSERT_EQ(words[0], i) << "page " << i;
    ASSERT_EQ(words[kWordsPerPage - 1], i) << "page " << i;
  }
  EXPECT_EQ(used(), 0u);  // every page came back to the host on access
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(ManagedTest, DeviceAllocationsEvictManagedPagesButNeverTheOtherWayRound) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kVram, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(fill(managed, 0xABCD, kVram / 4, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kVram);

  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, 16 * kMiB));  // evicts the 8 oldest managed pages
  EXPECT_EQ(used(), kVram);
  EXPECT_GT(fill_page_ms(managed, 1), kResidentMs);  // page 0 went to the host
  CUdeviceptr too_big = 0;
  EXPECT_EQ(cuMemAlloc(&too_big, kVram), CUDA_ERROR_OUT_OF_MEMORY);

  // A kernel on managed memory when VRAM is all cuMemAlloc memory reads it over the link.
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemAlloc(&device, kVram));  // evicts every managed page
  EXPECT_EQ(used(), kVram);
  ASSERT_CU(fill(managed, 5, kVram / 4, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kVram);
  EXPECT_EQ(host_copy<uint32_t>(managed, kVram / 4), std::vector<uint32_t>(kVram / 4, 5u));
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemFree(managed));
  EXPECT_EQ(used(), 0u);
}

TEST_F(ManagedTest, PreferredHostAndAccessedByAreReadZeroCopy) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, 4 * kPage, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemAdvise(managed, 4 * kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                        {CU_MEM_LOCATION_TYPE_HOST, 0}));
  ASSERT_CU(cuMemAdvise(managed, 4 * kPage, CU_MEM_ADVISE_SET_ACCESSED_BY,
                        {CU_MEM_LOCATION_TYPE_DEVICE, 0}));
  ASSERT_CU(fill(managed, 9, 4 * kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 0u);  // nothing migrated
  EXPECT_EQ(host_copy<uint32_t>(managed, 4 * kWordsPerPage),
            std::vector<uint32_t>(4 * kWordsPerPage, 9u));

  int preferred = 0;
  ASSERT_CU(cuMemRangeGetAttribute(&preferred, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                   managed, 4 * kPage));
  EXPECT_EQ(preferred, CU_DEVICE_CPU);
  CUmemLocationType type = CU_MEM_LOCATION_TYPE_INVALID;
  ASSERT_CU(cuMemRangeGetAttribute(&type, sizeof(type),
                                   CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, managed, kPage));
  EXPECT_EQ(type, CU_MEM_LOCATION_TYPE_HOST);
  int accessed_by[3] = {7, 7, 7};
  ASSERT_CU(cuMemRangeGetAttribute(accessed_by, sizeof(accessed_by),
                                   CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, managed, 4 * kPage));
  EXPECT_EQ(accessed_by[0], 0);
  EXPECT_EQ(accessed_by[1], CU_DEVICE_INVALID);
  EXPECT_EQ(accessed_by[2], CU_DEVICE_INVALID);

  // Without the advice, the same kernel migrates the pages.
  ASSERT_CU(cuMemAdvise(managed, 4 * kPage, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
                        {CU_MEM_LOCATION_TYPE_HOST, 0}));
  ASSERT_CU(cuMemAdvise(managed, 4 * kPage, CU_MEM_ADVISE_UNSET_ACCESSED_BY,
                        {CU_MEM_LOCATION_TYPE_DEVICE, 0}));
  ASSERT_CU(cuMemRangeGetAttribute(&preferred, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                   managed, 4 * kPage));
  EXPECT_EQ(preferred, CU_DEVICE_INVALID);
  ASSERT_CU(fill(managed, 10, 4 * kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 4 * kPage);
  ASSERT_CU(cuMemFree(managed));
}

// Note [Evictions take link time] (core/managed.cpp): room made by evicting written managed pages
// costs the copy of them to the host, to the prefetch, kernel or allocation that needed it.
TEST_F(ManagedTest, EvictionsForRoomCostTheirCopyToTheHost) {
  constexpr uint64_t kNeed = 16 * kMiB;  // 0.3 ms of link time, 8 pages
  CUdeviceptr filler = 0, wanted = 0;
  ASSERT_CU(cuMemAllocManaged(&filler, kVram, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemAllocManaged(&wanted, kNeed, CU_MEM_ATTACH_GLOBAL));
  std::memset(reinterpret_cast<void*>(wanted), 7, kNeed);
  const auto fill_vram = [&] {
    EXPECT_CU(fill(filler, 1, kVram / 4, stream_));
    EXPECT_CU(cuStreamSynchronize(stream_));
    EXPECT_EQ(used(), kVram);
  };
  const auto prefetch_ms = [&](CUmemLocation to) {
    return modeled_ms([&] { EXPECT_CU(cuMemPrefetchAsync(wanted, kNeed, to, 0, stream_)); });
  };
  const float with_room = prefetch_ms({CU_MEM_LOCATION_TYPE_DEVICE, 0});
  EXPECT_GT(with_room, 0.2f);
  EXPECT_GT(prefetch_ms({CU_MEM_LOCATION_TYPE_HOST, 0}), 0.2f);

  fill_vram();
  EXPECT_GT(prefetch_ms({CU_MEM_LOCATION_TYPE_DEVICE, 0}), 1.8f * with_room)
      << "its room was 16 MiB of written pages, copied out first";
  EXPECT_GT(prefetch_ms({CU_MEM_LOCATION_TYPE_HOST, 0}), 0.2f);

  fill_vram();
  const float migrated_ms = modeled_ms([&] { EXPECT_CU(fill(wanted, 2, kNeed / 4, stream_)); });
  EXPECT_GT(migrated_ms, 1.8f * with_room) << "the faults waited for the evictions too";

  CUdeviceptr device = 0;
  fill_vram();
  const float evicting_ms = modeled_ms([&] { EXPECT_CU(cuMemAlloc(&device, kNeed)); });
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemFree(filler));
  const float roomy_ms = modeled_ms([&] { EXPECT_CU(cuMemAlloc(&device, kNeed)); });
  EXPECT_GT(evicting_ms - roomy_ms, 0.8f * with_room)
      << "the allocating thread waited for the copies: work it queues after starts later";
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemFree(wanted));
}

// Note [The last prefetch location] (core/managed.cpp): the location asked for, from the call on,
// though the stream has not got to the prefetch.
TEST_F(ManagedTest, TheLastPrefetchLocationIsTheOneAskedFor) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kPage, CU_MEM_ATTACH_GLOBAL));
  int last = 0;
  {
    Gate gate;
    ASSERT_CU(gate.block(stream_));
    ASSERT_CU(cuMemPrefetchAsync(managed, kPage, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, stream_));
    ASSERT_CU(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                     managed, kPage));
    EXPECT_EQ(last, 0);
    EXPECT_EQ(used(), 0u) << "the prefetch has not run";
  }
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kPage);
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(ManagedTest, PrefetchMovesPagesInStreamOrder) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, 3 * kPage, CU_MEM_ATTACH_GLOBAL));
  int last = 0;
  ASSERT_CU(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed,
                                   3 * kPage));
  EXPECT_EQ(last, CU_DEVICE_INVALID);

  ASSERT_CU(cuMemPrefetchAsync(managed, 2 * kPage, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 2 * kPage);
  EXPECT_LT(fill_page_ms(managed + kPage, 1), kResidentMs);  // already there: no fault
  ASSERT_CU(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed,
                                   2 * kPage));
  EXPECT_EQ(last, 0);
  ASSERT_CU(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed,
                                   3 * kPage));
  EXPECT_EQ(last, CU_DEVICE_INVALID);  // the third page was never prefetched

  // The 8.0 ABI, as cudart looks it up: a device ordinal, CU_DEVICE_CPU for the host.
  PFN_cuMemPrefetchAsync_v8000 prefetch_v8000 = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  ASSERT_CU(cuGetProcAddress("cuMemPrefetchAsync", reinterpret_cast<void**>(&prefetch_v8000), 8000,
                             CU_GET_PROC_ADDRESS_DEFAULT, &found));
  ASSERT_CU(prefetch_v8000(managed, 3 * kPage, CU_DEVICE_CPU, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, managed,
                                   3 * kPage));
  EXPECT_EQ(last, CU_DEVICE_CPU);
  EXPECT_EQ(prefetch_v8000(managed, kPage, 5, stream_), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_CU(cuMemFree(managed));
}

// What vramspill's prefetch mover relies on: a page that prefers the host and is accessed by the
// device is read over the link until a prefetch on another stream brings it in, and a launch
// whose stream waits for that prefetch's event (cuStreamWaitEvent, on the device) finds it
// resident; a prefetch to the host gives the device its memory back.
TEST_F(ManagedTest, ALaunchThatWaitsForAPrefetchOnAnotherStreamFindsItsPageResident) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kPage, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(cuMemAdvise(managed, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                        {CU_MEM_LOCATION_TYPE_HOST, 0}));
  ASSERT_CU(cuMemAdvise(managed, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY,
                        {CU_MEM_LOCATION_TYPE_DEVICE, 0}));
  EXPECT_GT(fill_page_ms(managed, 1), kResidentMs);  // over the link
  EXPECT_EQ(used(), 0u);

  CUstream mover = nullptr;
  CUevent prefetched = nullptr;
  ASSERT_CU(cuStreamCreate(&mover, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuEventCreate(&prefetched, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuMemPrefetchAsync(managed, kPage, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, mover));
  ASSERT_CU(cuEventRecord(prefetched, mover));
  ASSERT_CU(cuStreamWaitEvent(stream_, prefetched, 0));
  EXPECT_LT(fill_page_ms(managed, 2), kResidentMs);
  EXPECT_EQ(used(), kPage);

  ASSERT_CU(cuMemPrefetchAsync(managed, kPage, {CU_MEM_LOCATION_TYPE_HOST, 0}, 0, mover));
  ASSERT_CU(cuStreamSynchronize(mover));
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(host_copy<uint32_t>(managed, kWordsPerPage), std::vector<uint32_t>(kWordsPerPage, 2u));
  ASSERT_CU(cuEventDestroy(prefetched));
  ASSERT_CU(cuStreamDestroy(mover));
  ASSERT_CU(cuMemFree(managed));
}

// Note [Pages before their first touch] (core/managed.cpp): a prefetch makes pages no one has
// touched where it sends them, moving nothing; once the host has written them it moves them.
TEST_F(ManagedTest, APrefetchMovesOnlyPagesSomethingTouched) {
  constexpr uint64_t kRange = 32 * kPage;  // 64 MiB: over a millisecond of link time
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kRange, CU_MEM_ATTACH_GLOBAL));
  const auto prefetch_ms = [&](CUmemLocation to) {
    return modeled_ms([&] { EXPECT_CU(cuMemPrefetchAsync(managed, kRange, to, 0, stream_)); });
  };
  EXPECT_LT(prefetch_ms({CU_MEM_LOCATION_TYPE_DEVICE, 0}), kResidentMs);
  EXPECT_EQ(used(), kRange) << "made on the device all the same";
  EXPECT_GT(prefetch_ms({CU_MEM_LOCATION_TYPE_HOST, 0}), 0.5f) << "made there: now they move";
  ASSERT_CU(cuMemFree(managed));

  ASSERT_CU(cuMemAllocManaged(&managed, kRange, CU_MEM_ATTACH_GLOBAL));
  std::memset(reinterpret_cast<void*>(managed), 7, kRange);
  EXPECT_GT(prefetch_ms({CU_MEM_LOCATION_TYPE_DEVICE, 0}), 0.5f);
  EXPECT_EQ(host_copy<uint8_t>(managed + kRange - 1, 1), std::vector<uint8_t>{7});
  ASSERT_CU(cuMemFree(managed));
}

// A system call may write into a managed buffer no one has touched, as on a GPU, and what it
// wrote counts as contents (Note [Pages before their first touch]).
TEST_F(ManagedTest, ASystemCallWritesIntoAFreshManagedBuffer) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kPage, CU_MEM_ATTACH_GLOBAL));
  int ends[2];
  ASSERT_EQ(pipe(ends), 0);
  const char text[] = "read into managed memory";
  ASSERT_EQ(write(ends[1], text, sizeof text), static_cast<ssize_t>(sizeof text));
  ASSERT_EQ(read(ends[0], reinterpret_cast<void*>(managed), sizeof text),
            static_cast<ssize_t>(sizeof text));
  close(ends[0]);
  close(ends[1]);
  EXPECT_STREQ(reinterpret_cast<const char*>(managed), text);
  EXPECT_GT(modeled_ms([&] {
              EXPECT_CU(cuMemPrefetchAsync(managed, kPage, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0,
                                           stream_));
            }),
            0.02f)
      << "its page moved nothing, as if untouched";
  ASSERT_CU(cuMemFree(managed));
}

// Note [Waiting for a prefetch] (core/managed.cpp): a kernel that nothing ordered after a
// prefetch, but that runs once the prefetch has, waits in modeled time for the pages it brings.
TEST_F(ManagedTest, AnUnorderedLaunchWaitsForThePagesAPrefetchIsBringing) {
  constexpr uint64_t kRange = 32 * kPage;  // 64 MiB: over a millisecond of link time
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kRange, CU_MEM_ATTACH_GLOBAL));
  // Written on the host first: pages never touched would be made on the device, moving nothing
  // (Note [Pages before their first touch]).
  std::memset(reinterpret_cast<void*>(managed), 7, kRange);
  CUstream mover = nullptr;
  ASSERT_CU(cuStreamCreate(&mover, CU_STREAM_NON_BLOCKING));
  prefetch_to_device_and_let_it_run(managed, kRange, mover);
  EXPECT_GT(fill_page_ms(managed, 1), 0.5f) << "the launch did not wait for its pages";
  ASSERT_CU(cuStreamSynchronize(mover));  // now past the prefetch's end
  EXPECT_LT(fill_page_ms(managed, 2), kResidentMs);
  ASSERT_CU(cuStreamDestroy(mover));
  ASSERT_CU(cuMemFree(managed));
}

// A graph's nodes run one after the other, so a node that touches pages still on the way waits
// only for what is left of their prefetch when it starts, not from the graph's start.
TEST_F(ManagedTest, AGraphNodeWaitsForAPrefetchFromItsOwnStart) {
  constexpr uint64_t kRange = 16 * kPage;  // 32 MiB: about 0.6 ms of link time
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kRange, CU_MEM_ATTACH_GLOBAL));
  std::memset(reinterpret_cast<void*>(managed), 7, kRange);  // touched: a prefetch moves it
  void* pinned = nullptr;
  ASSERT_CU(cuMemAllocHost(&pinned, kRange));
  CUdeviceptr linear = 0;
  ASSERT_CU(cuMemAlloc(&linear, kRange));
  // A copy over the link as long as the prefetch, then a fill of a page the prefetch brings.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemcpyHtoDAsync(linear, pinned, kRange, stream_));
  ASSERT_CU(fill(managed, 3, kWordsPerPage, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));

  CUstream mover = nullptr;
  ASSERT_CU(cuStreamCreate(&mover, CU_STREAM_NON_BLOCKING));
  prefetch_to_device_and_let_it_run(managed, kRange, mover);
  const float beside_the_prefetch = modeled_ms([&] { ASSERT_CU(cuGraphLaunch(exec, stream_)); });
  ASSERT_CU(cuStreamSynchronize(mover));
  const float alone = modeled_ms([&] { ASSERT_CU(cuGraphLaunch(exec, stream_)); });
  EXPECT_GT(alone, 0.4f);  // the copy
  // The fill starts after the copy, by when the prefetch is over: nothing more to wait for.
  EXPECT_LT(beside_the_prefetch, 1.2f * alone);

  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuStreamDestroy(mover));
  ASSERT_CU(cuMemFree(linear));
  ASSERT_CU(cuMemFreeHost(pinned));
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(ManagedTest, ReadMostlyPagesStayReadableOnTheHost) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, kPage, CU_MEM_ATTACH_GLOBAL));
  PFN_cuMemAdvise_v8000 advise_v8000 = nullptr;
  ASSERT_CU(cuGetProcAddress("cuMemAdvise", reinterpret_cast<void**>(&advise_v8000), 8000,
                             CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
  ASSERT_CU(advise_v8000(managed, kPage, CU_MEM_ADVISE_SET_READ_MOSTLY, 0));
  int read_mostly = 0;
  ASSERT_CU(
      cuMemRangeGetAttribute(&read_mostly, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kPage));
  EXPECT_EQ(read_mostly, 1);

  ASSERT_CU(fill(managed, 4, kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kPage);
  EXPECT_EQ(reinterpret_cast<const volatile uint32_t*>(managed)[100], 4u);
  EXPECT_EQ(used(), kPage);  // a read uses the host copy: the device copy stays
  // A prefetch to the host makes a read-only copy there, which there is: the device's stays.
  ASSERT_CU(cuMemPrefetchAsync(managed, kPage, {CU_MEM_LOCATION_TYPE_HOST, 0}, 0, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), kPage);
  reinterpret_cast<volatile uint32_t*>(managed)[100] = 5;
  EXPECT_EQ(used(), 0u);  // a write collapses the copies onto the host
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(ManagedTest, PagesFollowTheDeviceThatTouchesThem) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, 2 * kPage, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(fill(managed, 1, 2 * kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 2 * kPage);

  EXPECT_EQ(fill_on_device_1(managed + kPage, 2, kWordsPerPage), kPage)
      << "device 1 holds the page it touched";
  EXPECT_EQ(used(), kPage);  // device 0 kept the other page

  const auto* words = reinterpret_cast<const uint32_t*>(managed);
  EXPECT_EQ(words[0], 1u);
  EXPECT_EQ(words[kWordsPerPage], 2u);
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(cuMemFree(managed));
}

// cuMemAdvise, as documented: a page another device touches stays where it lives, mapped
// there, when it is accessed-by that device or in its preferred location (two devices that can
// access each other as peers); otherwise it migrates to the device that touched it.
TEST_F(ManagedTest, AnotherDevicesPageIsReadWhereItLivesWhenAdvised) {
  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, 3 * kPage, CU_MEM_ATTACH_GLOBAL));
  ASSERT_CU(fill(managed, 1, 3 * kWordsPerPage, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(used(), 3 * kPage);
  ASSERT_CU(cuMemAdvise(managed, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY,
                        {CU_MEM_LOCATION_TYPE_DEVICE, 1}));
  ASSERT_CU(cuMemAdvise(managed + kPage, kPage, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                        {CU_MEM_LOCATION_TYPE_DEVICE, 0}));

  EXPECT_EQ(fill_on_device_1(managed, 2, 3 * kWordsPerPage), kPage)
      << "only the unadvised page should have come over to device 1";
  EXPECT_EQ(used(), 2 * kPage);  // device 0 kept the two advised pages

  EXPECT_EQ(host_copy<uint32_t>(managed, 3 * kWordsPerPage),
            std::vector<uint32_t>(3 * kWordsPerPage, 2u));
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(ManagedTest, ArgumentsAreCheckedAsTheDriverDoes) {
  CUdeviceptr managed = 0;
  EXPECT_EQ(cuMemAllocManaged(&managed, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(nullptr, 16, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&managed, 16, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocManaged(&managed, 16, CU_MEM_ATTACH_GLOBAL | CU_MEM_ATTACH_HOST),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemAllocManaged(&managed, kPage, CU_MEM_ATTACH_GLOBAL));
  CUdeviceptr device = 0;
  ASSERT_CU(cuMemAlloc(&device, kPage));

  const CUmemLocation gpu{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  EXPECT_EQ(cuMemAdvise(device, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu),
            CUDA_ERROR_INVALID_VALUE);  // not managed memory
  EXPECT_EQ(cuMemAdvise(managed, 2 * kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu),
            CUDA_ERROR_INVALID_VALUE);  // past the end
  EXPECT_EQ(
      cuMemAdvise(managed, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, {CU_MEM_LOCATION_TYPE_DEVICE, 3}),
      CUDA_ERROR_INVALID_DEVICE);
  // cuda.h: accessed-by takes a device or the host; "all other location types are invalid".
  for (const CUmemLocationType numa :
       {CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT})
    EXPECT_EQ(cuMemAdvise(managed, kPage, CU_MEM_ADVISE_SET_ACCESSED_BY, {numa, 0}),
              CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchAsync(managed, kPage, gpu, 1, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemPrefetchAsync(device, kPage, gpu, 0, stream_), CUDA_ERROR_INVALID_VALUE);
  int value = 0;
  EXPECT_EQ(cuMemRangeGetAttribute(&value, 8, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, managed, kPage),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRangeGetAttribute(&value, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, device, kPage),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFree(device));
  ASSERT_CU(cuMemFree(managed));
  EXPECT_EQ(cuMemFree(managed), CUDA_ERROR_INVALID_VALUE);
}

// Each case needs its own cuInit with SIMCUDA_ATTRS set, so it runs in a re-executed child.
TEST(ManagedSupportDeathTest, DevicesWithoutManagedMemoryRefuseIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        init_child_with_attributes("MANAGED_MEMORY=0", 2);
        CUdeviceptr managed = 0;
        std::exit(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL) ==
                          CUDA_ERROR_NOT_SUPPORTED
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Without concurrent managed access, a device may not be advised as a range's preferred location
// or as one that accesses it, and no prefetch may be queued on its streams, whatever the
// destination; advice naming the host is still taken. The child's exit status: 0 when so.
int refusals_without_concurrent_access() {
  const CUdevice device = init_child_with_attributes("CONCURRENT_MANAGED_ACCESS=0", 2);
  CUdeviceptr managed = 0;
  if (cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS) return 3;
  const CUmemLocation on_device{CU_MEM_LOCATION_TYPE_DEVICE, device};
  const CUmemLocation on_host{CU_MEM_LOCATION_TYPE_HOST, 0};
  const bool refused =
      cuMemAdvise(managed, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device) ==
          CUDA_ERROR_INVALID_DEVICE &&
      cuMemAdvise(managed, 4096, CU_MEM_ADVISE_SET_ACCESSED_BY, on_device) ==
          CUDA_ERROR_INVALID_DEVICE &&
      cuMemPrefetchAsync(managed, 4096, on_device, 0, nullptr) == CUDA_ERROR_INVALID_DEVICE &&
      cuMemPrefetchAsync(managed, 4096, on_host, 0, nullptr) == CUDA_ERROR_INVALID_DEVICE;
  const bool host_taken =
      cuMemAdvise(managed, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_host) == CUDA_SUCCESS;
  return refused && host_taken ? 0 : 1;
}

TEST(ManagedSupportDeathTest, WithoutConcurrentAccessAdviceAndPrefetchesNamingTheDeviceAreRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(refusals_without_concurrent_access()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
