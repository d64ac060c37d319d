// The host time driver calls cost on the modeled host clock (Note [Host call costs] in
// tools/simcuda/src/core/host_call_cost.h): the figures measured on an H200, per 2 MiB granule
// of the range a call covers. Each case records an event on a fresh stream, makes the call and
// records another: a record stores the later of its stream's clock and the host's, so the
// elapsed time between the two is what the call charged the host, and work queued after the
// call starts that much later.
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "driver_test_support.h"

namespace {

constexpr size_t kGranule = 2 * kMiB;

// Microseconds, as the H200 measured them (per granule unless said otherwise).
constexpr double kMapDevice = 1.0, kMapHost = 0.9;
constexpr double kSetAccessDevice = 26.9, kSetAccessHost = 59.0;
constexpr double kUnmapDevice = 18.0, kUnmapHost = 33.3;
constexpr double kLaunch = 3.7;            // a call
constexpr double kAllocOrFree = 77 / 2.0;  // half of a cuMemAlloc + cuMemFree pair

class HostCallCostTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuEventCreate(&before_, 0));
    ASSERT_CU(cuEventCreate(&after_, 0));
  }
  void TearDown() override {
    cuEventDestroy(before_);
    cuEventDestroy(after_);
    cuStreamDestroy(stream_);
    DriverTest::TearDown();
  }

  // The modeled host microseconds `call` took (it must succeed).
  double host_microseconds(const std::function<CUresult()>& call) {
    EXPECT_CU(cuEventRecord(before_, stream_));
    EXPECT_CU(call());
    EXPECT_CU(cuEventRecord(after_, stream_));
    EXPECT_CU(cuEventSynchronize(after_));
    float milliseconds = -1;
    EXPECT_CU(cuEventElapsedTime(&milliseconds, before_, after_));
    return static_cast<double>(milliseconds) * 1e3;
  }

  // A physical allocation of `size` bytes at `location`.
  static CUmemGenericAllocationHandle create(CUmemLocation location, size_t size) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = location;
    CUmemGenericAllocationHandle handle = 0;
    EXPECT_CU(cuMemCreate(&handle, size, &prop, 0));
    return handle;
  }
  static CUmemAccessDesc read_write(CUmemLocation location) {
    CUmemAccessDesc desc{};
    desc.location = location;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return desc;
  }

  CUmemLocation device_location() const { return {CU_MEM_LOCATION_TYPE_DEVICE, device_}; }

  CUstream stream_ = nullptr;
  CUevent before_ = nullptr, after_ = nullptr;
};

// With SIMCUDA_VMM_COST=per-call (ctest simcuda.vmm_cost_per_call runs these cases so), a VMM
// call costs one granule's figure for each location its range covers, whatever its length.
bool vmm_cost_per_call() {
  const char* cost = std::getenv("SIMCUDA_VMM_COST");
  return cost != nullptr && std::string(cost) == "per-call";
}

// Map, set access and unmap, charged per granule at the location's figure (or per call).
TEST_F(HostCallCostTest, VmmCallsCostTheirMeasuredTimePerGranule) {
  struct Case {
    std::string name;
    CUmemLocation location;
    double map, set_access, unmap;
  };
  const std::vector<Case> cases = {
      {"device", device_location(), kMapDevice, kSetAccessDevice, kUnmapDevice},
      {"host numa", {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, kMapHost, kSetAccessHost, kUnmapHost},
      {"host", {CU_MEM_LOCATION_TYPE_HOST, 0}, kMapHost, kSetAccessHost, kUnmapHost}};
  for (const Case& c : cases) {
    for (const size_t granules : {size_t{1}, size_t{3}}) {
      SCOPED_TRACE(c.name + ", " + std::to_string(granules) + " granule(s)");
      const size_t size = granules * kGranule;
      const auto n = vmm_cost_per_call() ? 1.0 : static_cast<double>(granules);
      const CUmemGenericAllocationHandle handle = create(c.location, size);
      CUdeviceptr base = 0;
      ASSERT_CU(cuMemAddressReserve(&base, size, 0, 0, 0));
      EXPECT_NEAR(host_microseconds([&] { return cuMemMap(base, size, 0, handle, 0); }), n * c.map,
                  1e-3);
      const CUmemAccessDesc access = read_write(device_location());
      EXPECT_NEAR(host_microseconds([&] { return cuMemSetAccess(base, size, &access, 1); }),
                  n * c.set_access, 1e-3);
      EXPECT_NEAR(host_microseconds([&] { return cuMemUnmap(base, size); }), n * c.unmap, 1e-3);
      ASSERT_CU(cuMemAddressFree(base, size));
      ASSERT_CU(cuMemRelease(handle));
    }
  }
}

// One call over two device granules and two host-located ones pays each at its own figure
// (per call: each location's figure once).
TEST_F(HostCallCostTest, ARangeOfBothLocationsPaysEachGranuleItsOwn) {
  const CUmemGenericAllocationHandle on_device = create(device_location(), 2 * kGranule);
  const CUmemGenericAllocationHandle on_host =
      create({CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, 2 * kGranule);
  const double n = vmm_cost_per_call() ? 1.0 : 2.0;
  CUdeviceptr base = 0;
  ASSERT_CU(cuMemAddressReserve(&base, 4 * kGranule, 0, 0, 0));
  ASSERT_CU(cuMemMap(base, 2 * kGranule, 0, on_device, 0));
  ASSERT_CU(cuMemMap(base + 2 * kGranule, 2 * kGranule, 0, on_host, 0));
  const CUmemAccessDesc access = read_write(device_location());
  EXPECT_NEAR(host_microseconds([&] { return cuMemSetAccess(base, 4 * kGranule, &access, 1); }),
              n * (kSetAccessDevice + kSetAccessHost), 1e-3);
  EXPECT_NEAR(host_microseconds([&] { return cuMemUnmap(base, 4 * kGranule); }),
              n * (kUnmapDevice + kUnmapHost), 1e-3);
  ASSERT_CU(cuMemAddressFree(base, 4 * kGranule));
  ASSERT_CU(cuMemRelease(on_device));
  ASSERT_CU(cuMemRelease(on_host));
}

// Half of a measured pair each, per call whatever the size (Note [Host call costs]).
TEST_F(HostCallCostTest, AllocationAndFreeCostHalfAPairPerCall) {
  for (const size_t bytes : {size_t{4096}, 5 * kMiB}) {
    SCOPED_TRACE(bytes);
    CUdeviceptr pointer = 0;
    EXPECT_NEAR(host_microseconds([&] { return cuMemAlloc(&pointer, bytes); }), kAllocOrFree,
                1e-3);
    EXPECT_NEAR(host_microseconds([&] { return cuMemFree(pointer); }), kAllocOrFree, 1e-3);
  }
}

// A launch costs the host its measured time whichever stream it goes to; the kernel itself
// (3 us of launch overhead on its stream, nothing to touch) is not on the timed stream.
TEST_F(HostCallCostTest, ALaunchCostsTheHostItsMeasuredTime) {
  CUmodule module = nullptr;
  CUfunction fill = nullptr;
  ASSERT_CU(cuModuleLoadData(&module, "simcuda accepts any image"));
  ASSERT_CU(cuModuleGetFunction(&fill, module, "vs_fill_u32"));
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 4096));
  uint32_t value = 1;
  uint64_t count = 0;
  void* params[] = {&buffer, &value, &count};
  EXPECT_NEAR(host_microseconds([&] {
                return cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
              }),
              kLaunch, 1e-3);
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemFree(buffer));
  ASSERT_CU(cuModuleUnload(module));
}

// A call that fails costs nothing.
TEST_F(HostCallCostTest, AFailedCallCostsNothing) {
  const CUmemGenericAllocationHandle handle = create(device_location(), kGranule);
  CUdeviceptr base = 0;
  ASSERT_CU(cuMemAddressReserve(&base, kGranule, 0, 0, 0));
  ASSERT_CU(cuEventRecord(before_, stream_));
  EXPECT_EQ(cuMemMap(base, kGranule, 0, handle, /*flags=*/1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(base, kGranule), CUDA_ERROR_INVALID_VALUE);  // nothing mapped
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc(&pointer, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuEventRecord(after_, stream_));
  ASSERT_CU(cuEventSynchronize(after_));
  float milliseconds = -1;
  ASSERT_CU(cuEventElapsedTime(&milliseconds, before_, after_));
  EXPECT_EQ(milliseconds, 0.0f);
  ASSERT_CU(cuMemAddressFree(base, kGranule));
  ASSERT_CU(cuMemRelease(handle));
}

TEST(HostCallCostDeathTest, AnUnknownVmmCostFailsCuInit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SIMCUDA_VMM_COST", "per-byte", 1);
        std::exit(cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "SIMCUDA_VMM_COST='per-byte': expected per-granule or per-call");
}

}  // namespace
