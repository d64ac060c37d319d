// Virtual memory management on simcuda (1 GiB device): reservations, physical handles mapped at
// several addresses (aliasing), access control, faults on unmapped or inaccessible ranges, exact
// VRAM accounting and handle lifetimes.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernel_test_support.h"
#include "stream_test_support.h"

namespace {

constexpr size_t kGranule = 2 * kMiB;

CUmemAllocationProp device_prop(int ordinal = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
  return prop;
}

CUmemAllocationProp host_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  return prop;
}

CUmemAccessDesc read_write(CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE, int id = 0) {
  return {{type, id}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
}

CUmemAccessDesc read_only(CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE, int id = 0) {
  return {{type, id}, CU_MEM_ACCESS_FLAGS_PROT_READ};
}

// In a death-test child: reserves `granules` granules, maps one handle over all of them and gives
// device 0 read-write access; exits with 2 when any of that fails.
CUdeviceptr map_read_write_or_exit(size_t granules, CUmemGenericAllocationHandle* handle) {
  CUdeviceptr reserved = 0;
  const CUmemAllocationProp prop = device_prop();
  const CUmemAccessDesc access = read_write();
  if (cuMemAddressReserve(&reserved, granules * kGranule, 0, 0, 0) != CUDA_SUCCESS ||
      cuMemCreate(handle, granules * kGranule, &prop, 0) != CUDA_SUCCESS ||
      cuMemMap(reserved, granules * kGranule, 0, *handle, 0) != CUDA_SUCCESS ||
      cuMemSetAccess(reserved, granules * kGranule, &access, 1) != CUDA_SUCCESS)
    std::exit(2);
  return reserved;
}

class VmmTest : public KernelFixture {
 protected:
  static unsigned long long access_of(CUdeviceptr ptr, CUmemLocation location) {
    unsigned long long flags = 99;
    EXPECT_CU(cuMemGetAccess(&flags, &location, ptr));
    return flags;
  }
  [[noreturn]] void exit_with_read_only_results();
};

using VmmDeathTest = VmmTest;

TEST_F(VmmTest, GranularityIsTwoMebibytes) {
  size_t granularity = 0;
  const CUmemAllocationProp prop = device_prop();
  ASSERT_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_EQ(granularity, kGranule);
  ASSERT_CU(
      cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT_EQ(granularity, kGranule);
  const CUmemAllocationProp bad_device = device_prop(4);
  EXPECT_EQ(
      cuMemGetAllocationGranularity(&granularity, &bad_device, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
      CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(VmmTest, OneHandleMappedTwiceShowsTheSameBytes) {
  CUdeviceptr reserved = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, 4 * kGranule, 0, 0, 0));
  EXPECT_EQ(reserved % kGranule, 0u);
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp prop = device_prop();
  ASSERT_CU(cuMemCreate(&handle, kGranule, &prop, 0));
  EXPECT_EQ(used(), kGranule);  // physical memory is VRAM from cuMemCreate on

  const CUdeviceptr first = reserved, second = reserved + 2 * kGranule;
  ASSERT_CU(cuMemMap(first, kGranule, 0, handle, 0));
  ASSERT_CU(cuMemMap(second, kGranule, 0, handle, 0));
  EXPECT_EQ(used(), kGranule);  // mappings take no VRAM
  const CUmemAccessDesc access = read_write();
  ASSERT_CU(cuMemSetAccess(first, kGranule, &access, 1));
  ASSERT_CU(cuMemSetAccess(second, kGranule, &access, 1));

  std::vector<uint32_t> pattern(kGranule / 4);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint32_t>(i * 2654435761u);
  upload(first, pattern);
  EXPECT_EQ(download<uint32_t>(second, pattern.size()), pattern);  // a copy sees the alias

  ASSERT_CU(fill(second + 4096, 0xFEEDu, 100));  // a kernel writes through the other mapping
  ASSERT_CU(cuCtxSynchronize());
  const std::vector<uint32_t> seen = download<uint32_t>(first + 4096, 101);
  EXPECT_EQ(std::vector<uint32_t>(seen.begin(), seen.begin() + 100),
            std::vector<uint32_t>(100, 0xFEEDu));
  EXPECT_EQ(seen[100], pattern[1024 + 100]);

  CUdeviceptr start = 0;
  ASSERT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, second + 8));
  EXPECT_EQ(start, second);

  ASSERT_CU(cuMemUnmap(first, kGranule));
  ASSERT_CU(cuMemUnmap(second, kGranule));
  ASSERT_CU(cuMemRelease(handle));
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(cuMemAddressFree(reserved, 4 * kGranule));
}

TEST_F(VmmTest, PhysicalMemoryLivesUntilReleasedAndUnmapped) {
  CUdeviceptr reserved = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, 2 * kGranule, kGranule, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp prop = device_prop();
  ASSERT_CU(cuMemCreate(&handle, 2 * kGranule, &prop, 0));
  ASSERT_CU(cuMemMap(reserved, 2 * kGranule, 0, handle, 0));
  const CUmemAccessDesc access = read_write();
  ASSERT_CU(cuMemSetAccess(reserved, 2 * kGranule, &access, 1));
  ASSERT_CU(cuMemRelease(handle));  // still mapped: the memory stays
  EXPECT_EQ(used(), 2 * kGranule);
  CUmemAllocationProp released{};
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&released, handle), CUDA_ERROR_INVALID_VALUE);
  upload(reserved + kGranule, std::vector<uint32_t>(16, 42u));

  CUmemGenericAllocationHandle retained = 0;
  ASSERT_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(reserved + kGranule)));
  EXPECT_EQ(retained, handle);
  CUmemAllocationProp props{};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&props, retained));
  EXPECT_EQ(props.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(props.location.id, 0);
  ASSERT_CU(cuMemRelease(retained));
  EXPECT_EQ(used(), 2 * kGranule);
  EXPECT_EQ(download<uint32_t>(reserved + kGranule, 16), std::vector<uint32_t>(16, 42u));
  ASSERT_CU(cuMemUnmap(reserved, 2 * kGranule));  // the last use: now it is freed
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(cuMemRelease(handle), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemAddressFree(reserved, 2 * kGranule));
}

TEST_F(VmmTest, VramAccountingIsExact) {
  const CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle too_big = 0, whole = 0, more = 0;
  EXPECT_EQ(cuMemCreate(&too_big, 2 * kGiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuMemCreate(&whole, kGiB - kGranule, &prop, 0));
  EXPECT_EQ(used(), kGiB - kGranule);
  EXPECT_EQ(cuMemCreate(&more, 2 * kGranule, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr device = 0;
  EXPECT_EQ(cuMemAlloc(&device, kGranule + 4096), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_CU(cuMemCreate(&more, kGranule, &prop, 0));
  EXPECT_EQ(used(), kGiB);
  ASSERT_CU(cuMemRelease(whole));
  ASSERT_CU(cuMemRelease(more));
  EXPECT_EQ(used(), 0u);
}

// PyTorch's expandable segments ask for GPUDirect RDMA when the device reports it with VMM, as an
// H200 does: 20 MiB handles with allocFlags.gpuDirectRDMACapable = 1 (measured, driver 580).
TEST_F(VmmTest, HandlesForGpuDirectRdmaAreCreatedAsPyTorchAsksForThem) {
  int supported = 0;
  ASSERT_CU(cuDeviceGetAttribute(&supported,
                                 CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0));
  EXPECT_EQ(supported, 1);
  CUmemAllocationProp prop = device_prop();
  prop.allocFlags.gpuDirectRDMACapable = 1;
  constexpr size_t kSegment = 20 * kMiB;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(cuMemCreate(&handle, kSegment, &prop, 0));
  CUmemAllocationProp read_back{};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&read_back, handle));
  EXPECT_EQ(read_back.allocFlags.gpuDirectRDMACapable, 1);
  CUdeviceptr reserved = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, kSegment, 0, 0, 0));
  ASSERT_CU(cuMemMap(reserved, kSegment, 0, handle, 0));
  const CUmemAccessDesc access = read_write();
  ASSERT_CU(cuMemSetAccess(reserved, kSegment, &access, 1));
  ASSERT_CU(fill(reserved, 0x5eu, kSegment / 4));
  EXPECT_EQ(download<uint32_t>(reserved + kSegment - 64, 16), std::vector<uint32_t>(16, 0x5eu));
  ASSERT_CU(cuMemUnmap(reserved, kSegment));
  ASSERT_CU(cuMemAddressFree(reserved, kSegment));
  ASSERT_CU(cuMemRelease(handle));
}

// cuda.h documents gpuDirectRDMACapable as an allocation hint, for devices with
// GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, and no refusal of it for any location: a host-located
// request that carries it is made like any other and reads back as asked (what a real driver
// reads back there is unverified; the shim drops the hint on the host handles it makes).
TEST_F(VmmTest, TheRdmaHintOnAHostLocatedRequestIsNoReasonToRefuseIt) {
  CUmemAllocationProp prop = host_prop();
  prop.allocFlags.gpuDirectRDMACapable = 1;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_CU(cuMemCreate(&handle, kGranule, &prop, 0));
  EXPECT_EQ(used(), 0u) << "host memory takes no VRAM";
  CUmemAllocationProp read_back{};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&read_back, handle));
  EXPECT_EQ(read_back.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(read_back.allocFlags.gpuDirectRDMACapable, 1);
  ASSERT_CU(cuMemRelease(handle));
}

TEST_F(VmmTest, HostLocatedMemoryTakesNoVramAndCanBeOpenedToTheHost) {
  CUdeviceptr reserved = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, kGranule, 0, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp prop = host_prop();
  ASSERT_CU(cuMemCreate(&handle, kGranule, &prop, 0));
  EXPECT_EQ(used(), 0u);
  ASSERT_CU(cuMemMap(reserved, kGranule, 0, handle, 0));
  const CUmemAccessDesc both[] = {read_write(), read_write(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0)};
  ASSERT_CU(cuMemSetAccess(reserved, kGranule, both, 2));
  ASSERT_CU(fill(reserved, 0x600Du, kGranule / 4));
  ASSERT_CU(cuCtxSynchronize());
  const auto* words = reinterpret_cast<const uint32_t*>(reserved);  // the CPU reads it directly
  EXPECT_EQ(std::vector<uint32_t>(words, words + kGranule / 4),
            std::vector<uint32_t>(kGranule / 4, 0x600Du));
  EXPECT_EQ(access_of(reserved, {CU_MEM_LOCATION_TYPE_HOST, 0}),
            static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  EXPECT_EQ(used(), 0u);

  // Host access to device-located memory is refused.
  CUmemGenericAllocationHandle vram = 0;
  const CUmemAllocationProp on_device = device_prop();
  ASSERT_CU(cuMemCreate(&vram, kGranule, &on_device, 0));
  CUdeviceptr other = 0;
  ASSERT_CU(cuMemAddressReserve(&other, kGranule, 0, 0, 0));
  ASSERT_CU(cuMemMap(other, kGranule, 0, vram, 0));
  const CUmemAccessDesc host_only = read_write(CU_MEM_LOCATION_TYPE_HOST, 0);
  EXPECT_EQ(cuMemSetAccess(other, kGranule, &host_only, 1), CUDA_ERROR_NOT_SUPPORTED);

  ASSERT_CU(cuMemUnmap(other, kGranule));
  ASSERT_CU(cuMemUnmap(reserved, kGranule));
  ASSERT_CU(cuMemRelease(vram));
  ASSERT_CU(cuMemRelease(handle));
  ASSERT_CU(cuMemAddressFree(other, kGranule));
  ASSERT_CU(cuMemAddressFree(reserved, kGranule));
}

TEST_F(VmmTest, CopiesRefuseUnmappedAndInaccessibleRanges) {
  CUdeviceptr reserved = 0;
  ASSERT_CU(cuMemAddressReserve(&reserved, 2 * kGranule, 0, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp prop = device_prop();
  ASSERT_CU(cuMemCreate(&handle, kGranule, &prop, 0));
  ASSERT_CU(cuMemMap(reserved, kGranule, 0, handle, 0));
  std::vector<uint32_t> data(256, 1u);

  // Mapped, no access yet.
  EXPECT_EQ(access_of(reserved, {CU_MEM_LOCATION_TYPE_DEVICE, 0}),
            static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE));
  EXPECT_EQ(cuMemcpyHtoD(reserved, data.data(), 1024), CUDA_ERROR_INVALID_VALUE);
  const CUmemAccessDesc access = read_write();
  ASSERT_CU(cuMemSetAccess(reserved, kGranule, &access, 1));
  EXPECT_EQ(access_of(reserved, {CU_MEM_LOCATION_TYPE_DEVICE, 0}),
            static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  ASSERT_CU(cuMemcpyHtoD(reserved, data.data(), 1024));

  // Reserved but unmapped, and straddling the mapped end.
  EXPECT_EQ(cuMemcpyHtoD(reserved + kGranule, data.data(), 1024), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(reserved + kGranule - 512, data.data(), 1024), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemSetAccess(reserved, 2 * kGranule, &access, 1), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMemUnmap(reserved, kGranule));
  EXPECT_EQ(cuMemcpyHtoD(reserved, data.data(), 1024), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemRelease(handle));
  ASSERT_CU(cuMemAddressFree(reserved, 2 * kGranule));
}

// Note [A range is charged mapping by mapping] in core/traffic.h: a kernel over a range of four
// granule mappings, two of them host-located, pays the link for both host granules, not for
// the first mapping only.
TEST_F(VmmTest, AKernelPaysForEveryMappingItsRangeCrosses) {
  CUdeviceptr reserved = 0;
  CUdeviceptr out = 0;
  CUmemGenericAllocationHandle handles[4] = {};
  const CUmemAccessDesc access = read_write();
  ASSERT_CU(cuMemAddressReserve(&reserved, 4 * kGranule, 0, 0, 0));
  for (size_t i = 0; i < 4; ++i) {
    const CUmemAllocationProp prop = i % 2 == 0 ? host_prop() : device_prop();
    ASSERT_CU(cuMemCreate(&handles[i], kGranule, &prop, 0));
    ASSERT_CU(cuMemMap(reserved + i * kGranule, kGranule, 0, handles[i], 0));
    ASSERT_CU(cuMemSetAccess(reserved + i * kGranule, kGranule, &access, 1));
  }
  ASSERT_CU(cuMemAlloc(&out, 4 * kGranule));
  CUevent marks[3];
  for (CUevent& mark : marks) ASSERT_CU(cuEventCreate(&mark, CU_EVENT_DEFAULT));
  ASSERT_CU(cuEventRecord(marks[0], nullptr));
  ASSERT_CU(copy(out, reserved, kGranule));  // the first host granule alone
  ASSERT_CU(cuEventRecord(marks[1], nullptr));
  ASSERT_CU(copy(out, reserved, 4 * kGranule));  // both host granules and both device ones
  ASSERT_CU(cuEventRecord(marks[2], nullptr));
  ASSERT_CU(cuEventSynchronize(marks[2]));
  float one = 0;
  float all = 0;
  ASSERT_CU(cuEventElapsedTime(&one, marks[0], marks[1]));
  ASSERT_CU(cuEventElapsedTime(&all, marks[1], marks[2]));
  // The link dominates: two host granules take about twice as long as one.
  EXPECT_GT(all, 1.8f * one) << "one host granule " << one << " ms, the range " << all << " ms";
  for (CUevent mark : marks) ASSERT_CU(cuEventDestroy(mark));
  ASSERT_CU(cuMemFree(out));
  for (size_t i = 0; i < 4; ++i) ASSERT_CU(cuMemUnmap(reserved + i * kGranule, kGranule));
  for (CUmemGenericAllocationHandle handle : handles) ASSERT_CU(cuMemRelease(handle));
  ASSERT_CU(cuMemAddressFree(reserved, 4 * kGranule));
}

// A poisoned context stays poisoned: the kernel cases run in re-executed children.
TEST_F(VmmDeathTest, KernelOnUnmappedRangeIsAnIllegalAddress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CUdeviceptr reserved = 0;
        if (cuMemAddressReserve(&reserved, 2 * kGranule, 0, 0, 0) != CUDA_SUCCESS) std::exit(2);
        if (fill(reserved + kGranule, 1, 16) != CUDA_SUCCESS) std::exit(3);
        std::exit(cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(VmmDeathTest, KernelOnMappingWithoutAccessIsAnIllegalAddress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CUdeviceptr reserved = 0;
        CUmemGenericAllocationHandle handle = 0;
        const CUmemAllocationProp prop = device_prop();
        if (cuMemAddressReserve(&reserved, kGranule, 0, 0, 0) != CUDA_SUCCESS ||
            cuMemCreate(&handle, kGranule, &prop, 0) != CUDA_SUCCESS ||
            cuMemMap(reserved, kGranule, 0, handle, 0) != CUDA_SUCCESS)
          std::exit(2);
        if (fill(reserved, 1, 16) != CUDA_SUCCESS) std::exit(3);
        std::exit(cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// The child of WritesIntoAReadOnlyMappingAreRefusedAndReadsWork: reports what each call returned.
[[noreturn]] void VmmTest::exit_with_read_only_results() {
  CUmemGenericAllocationHandle handle = 0;
  const CUdeviceptr reserved = map_read_write_or_exit(2, &handle);
  const CUdeviceptr writable = reserved, readable = reserved + kGranule;
  CUdeviceptr device = 0;
  std::vector<uint32_t> pattern(1024);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint32_t>(i * 7 + 1);
  const CUmemAccessDesc access = read_only();
  if (cuMemAlloc(&device, 4096) != CUDA_SUCCESS ||
      cuMemcpyHtoD(readable, pattern.data(), 4096) != CUDA_SUCCESS ||
      cuMemSetAccess(readable, kGranule, &access, 1) != CUDA_SUCCESS)
    std::exit(3);
  CUDA_MEMCPY2D copy_2d{};
  copy_2d.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy_2d.srcHost = pattern.data();
  copy_2d.srcPitch = 64;
  copy_2d.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy_2d.dstDevice = readable;
  copy_2d.dstPitch = 128;
  copy_2d.WidthInBytes = 64;
  copy_2d.Height = 4;
  std::fprintf(stderr, "htod=%d htod_async=%d dtod=%d copy=%d copy_2d=%d ",
               cuMemcpyHtoD(readable, pattern.data(), 4096),
               cuMemcpyHtoDAsync(readable, pattern.data(), 4096, nullptr),
               cuMemcpyDtoD(readable, device, 4096), cuMemcpy(readable, device, 4096),
               cuMemcpy2D(&copy_2d));
  std::fprintf(stderr, "d32=%d d8_async=%d d2d16=%d straddling=%d ", cuMemsetD32(readable, 0, 1024),
               cuMemsetD8Async(readable + 1, 0, 1, nullptr), cuMemsetD2D16(readable, 256, 0, 8, 8),
               cuMemcpyHtoD(writable + kGranule - 64, pattern.data(), 128));
  // Nothing was written, and the bytes read back in every way.
  const bool intact = download<uint32_t>(readable, pattern.size()) == pattern;
  const CUresult dtod_from = cuMemcpyDtoD(device, readable, 4096);
  const bool copied = download<uint32_t>(device, pattern.size()) == pattern;
  const CUresult kernel_read = copy(device, readable + 4, 4096 - 4);
  const CUresult synchronized = cuCtxSynchronize();
  const CUresult into_writable = cuMemcpyHtoD(writable, pattern.data(), 4096);
  std::fprintf(stderr, "intact=%d dtod_from=%d copied=%d kernel=%d sync=%d writable=%d\n", intact,
               dtod_from, copied, kernel_read, synchronized, into_writable);
  std::exit(0);
}

// The copy engine writes through the shadow view, which is read-only where devices may only read:
// copies and memsets into such a mapping are refused at the call (CUDA_ERROR_INVALID_VALUE, as
// for any range devices cannot write), while reading it works. Before simcuda checked this, the
// write killed the process with SIGSEGV, so the case runs in a child: a crash fails the test
// instead of ending the test program.
TEST_F(VmmDeathTest, WritesIntoAReadOnlyMappingAreRefusedAndReadsWork) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_with_read_only_results(), ::testing::ExitedWithCode(0),
              "htod=1 htod_async=1 dtod=1 copy=1 copy_2d=1 d32=1 d8_async=1 d2d16=1 straddling=1 "
              "intact=1 dtod_from=0 copied=1 kernel=0 sync=0 writable=0");
}

// Checked at the call, the bytes move later: a mapping made read-only or unmapped while a copy or
// memset into it waits on its stream makes that work fault on the worker thread. That poisons the
// context (CUDA_ERROR_ILLEGAL_ADDRESS, as a faulting copy does on a GPU) instead of killing the
// process.
[[noreturn]] void revoke_while_queued(bool memset, bool unmap) {
  CUmemGenericAllocationHandle handle = 0;
  const CUdeviceptr mapped = map_read_write_or_exit(1, &handle);
  CUstream stream = nullptr;
  if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) std::exit(2);
  Gate gate;
  if (gate.block(stream) != CUDA_SUCCESS) std::exit(2);
  std::vector<uint32_t> source(1024, 5u);
  const CUresult queued = memset ? cuMemsetD32Async(mapped, 1u, 1024, stream)
                                 : cuMemcpyHtoDAsync(mapped, source.data(), 4096, stream);
  if (queued != CUDA_SUCCESS) std::exit(3);
  const CUmemAccessDesc access = read_only();
  const CUresult revoked =
      unmap ? cuMemUnmap(mapped, kGranule) : cuMemSetAccess(mapped, kGranule, &access, 1);
  if (revoked != CUDA_SUCCESS) std::exit(4);
  gate.open();
  const CUresult synchronized = cuStreamSynchronize(stream);
  CUdeviceptr later = 0;
  const CUresult allocated = cuMemAlloc(&later, 16);
  std::fprintf(stderr, "synchronize=%d later=%d\n", synchronized, allocated);
  std::exit(0);
}

TEST_F(VmmDeathTest, MappingRevokedUnderAQueuedCopyPoisonsTheContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(revoke_while_queued(/*memset=*/false, /*unmap=*/false),
              ::testing::ExitedWithCode(0),
              "simcuda: copy touched inaccessible address 0x[0-9a-f]+.*synchronize=700 later=700");
  EXPECT_EXIT(revoke_while_queued(/*memset=*/false, /*unmap=*/true),
              ::testing::ExitedWithCode(0), "synchronize=700 later=700");
}

TEST_F(VmmDeathTest, MappingRevokedUnderAQueuedMemsetPoisonsTheContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(revoke_while_queued(/*memset=*/true, /*unmap=*/false),
              ::testing::ExitedWithCode(0),
              "simcuda: memset touched inaccessible address 0x[0-9a-f]+.*synchronize=700 later=700");
  EXPECT_EXIT(revoke_while_queued(/*memset=*/true, /*unmap=*/true),
              ::testing::ExitedWithCode(0), "synchronize=700 later=700");
}

TEST_F(VmmTest, ArgumentsAreCheckedAsTheDriverDoes) {
  const CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr reserved = 0;
  EXPECT_EQ(cuMemCreate(&handle, kGranule + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&handle, kGranule, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp bad_device = device_prop(3);
  EXPECT_EQ(cuMemCreate(&handle, kGranule, &bad_device, 0), CUDA_ERROR_INVALID_DEVICE);
  CUmemAllocationProp exported = device_prop();
  exported.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_EQ(cuMemCreate(&handle, kGranule, &exported, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemAddressReserve(&reserved, kGranule + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  // cuda.h: HOST_NUMA_CURRENT "will result in CUDA_ERROR_INVALID_VALUE", and a HOST_NUMA id must
  // be a node of the host (the simulated one has node 0 only, every device's HOST_NUMA_ID).
  CUmemAllocationProp on_host = host_prop();
  on_host.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0};
  EXPECT_EQ(cuMemCreate(&handle, kGranule, &on_host, 0), CUDA_ERROR_INVALID_VALUE);
  on_host.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 1};
  EXPECT_EQ(cuMemCreate(&handle, kGranule, &on_host, 0), CUDA_ERROR_INVALID_VALUE);

  ASSERT_CU(cuMemAddressReserve(&reserved, 4 * kGranule, 0, 0, 0));
  ASSERT_CU(cuMemCreate(&handle, 2 * kGranule, &prop, 0));
  EXPECT_EQ(cuMemMap(reserved + 4096, kGranule, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(reserved, kGranule, 2 * kGranule, handle, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(reserved + 3 * kGranule, 2 * kGranule, 0, handle, 0),
            CUDA_ERROR_INVALID_VALUE);  // runs past the reservation
  ASSERT_CU(cuMemMap(reserved, 2 * kGranule, 0, handle, 0));
  EXPECT_EQ(cuMemMap(reserved + kGranule, kGranule, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(reserved, kGranule), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  EXPECT_EQ(cuMemAddressFree(reserved, 4 * kGranule), CUDA_ERROR_INVALID_VALUE);  // still mapped
  EXPECT_EQ(cuMemFree(reserved), CUDA_ERROR_INVALID_VALUE);  // not cuMemAlloc memory

  // A fixed-address request is honoured when the range is free.
  ASSERT_CU(cuMemUnmap(reserved, 2 * kGranule));
  ASSERT_CU(cuMemAddressFree(reserved, 4 * kGranule));
  CUdeviceptr again = 0;
  ASSERT_CU(cuMemAddressReserve(&again, 2 * kGranule, 0, reserved + 2 * kGranule, 0));
  EXPECT_EQ(again, reserved + 2 * kGranule);
  ASSERT_CU(cuMemAddressFree(again, 2 * kGranule));
  ASSERT_CU(cuMemRelease(handle));
  EXPECT_EQ(cuMemRelease(handle), CUDA_ERROR_INVALID_VALUE);
}

// Support depends on device attributes, read at cuInit: each case is a re-executed child.
[[noreturn]] void exit_with_vmm_results(const char* attributes) {
  init_child_with_attributes(attributes, 100);
  CUdeviceptr reserved = 0;
  CUmemGenericAllocationHandle handle = 0;
  const CUmemAllocationProp on_device = device_prop(), on_host = host_prop();
  const CUresult reserve = cuMemAddressReserve(&reserved, kGranule, 0, 0, 0);
  const CUresult device_create = cuMemCreate(&handle, kGranule, &on_device, 0);
  const CUresult host_create = cuMemCreate(&handle, kGranule, &on_host, 0);
  std::exit((reserve == CUDA_SUCCESS ? 1 : 0) + (device_create == CUDA_SUCCESS ? 2 : 0) +
            (host_create == CUDA_SUCCESS ? 4 : 0) +
            (host_create == CUDA_ERROR_NOT_SUPPORTED ? 8 : 0) +
            (device_create == CUDA_ERROR_NOT_SUPPORTED ? 16 : 0));
}

TEST(VmmSupportDeathTest, NoVmmMeansNotSupported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_with_vmm_results("VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED=0"),
              ::testing::ExitedWithCode(8 + 16), "");
}

TEST(VmmSupportDeathTest, NoHostVmmMeansNoHostLocatedHandles) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // host_prop() is HOST_NUMA, which needs the NUMA attribute; HOST alone does not make it.
  EXPECT_EXIT(exit_with_vmm_results("HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED=0"),
              ::testing::ExitedWithCode(1 + 2 + 8), "");
  EXPECT_EXIT(exit_with_vmm_results("HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED=0"),
              ::testing::ExitedWithCode(1 + 2 + 4), "");
}

}  // namespace
