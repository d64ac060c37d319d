// Every allocation route (shim/README.md, "Interception"), called by a program linked to libcuda
// (the toolkit's stub, simcuda at run time), is held to the device budget.
//
// Run twice (CMakeLists.txt): under the shim with VRAMSPILL_DEVICE_BUDGET=256MiB and
// VRAMSPILL_SPILL_MODE=off on simcuda's 1 GiB device (ROUTES_EXPECT=shim), where 512 MiB is
// refused with CUDA_ERROR_OUT_OF_MEMORY by every route; and without the preload
// (ROUTES_EXPECT=driver), where the same calls succeed. Between the two the only difference is
// the shim, so a route that succeeds under it is a route it does not see.
#include <ostream>
#include <string>
#include <vector>

#include "routes_support.h"

namespace {

using routes::check_mode;
using routes::is_export;
using routes::kBudget;
using routes::kDeviceMemory;
using routes::kGiB;
using routes::kMiB;
using routes::under_shim;

// What one allocation is named by, whichever route made it.
struct Held {
  CUdeviceptr pointer = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUarray array = nullptr;
};

class BudgetRoutes;

struct Route {
  const char* name;
  // Whether simcuda charges the allocation to VRAM at once (managed pages start on the host).
  bool driver_charges;
  CUresult (*allocate)(BudgetRoutes& test, size_t bytes, Held& held);
  CUresult (*release)(BudgetRoutes& test, Held& held);
};

// For gtest's messages ("GetParam() = cuMemAlloc" rather than a dump of bytes).
void PrintTo(const Route& route, std::ostream* out) { *out << route.name; }

class BudgetRoutes : public routes::PrimaryContextTest<::testing::TestWithParam<Route>> {
 public:
  CUstream stream() const { return stream_; }
  CUmemoryPool pool() const { return pool_; }
  const routes::PerThreadExports& per_thread() const { return per_thread_; }

 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(PrimaryContextTest::SetUp());
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device()};
    ASSERT_CU(cuMemPoolCreate(&pool_, &props));
    ASSERT_NO_FATAL_FAILURE(routes::look_up_per_thread_exports(per_thread_, under_shim()));
    ASSERT_EQ(free_bytes(), under_shim() ? kBudget : kDeviceMemory) << "a test leaked memory";
  }

  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_CU(cuStreamDestroy(stream_));
    }
    if (pool_ != nullptr) {
      EXPECT_CU(cuMemPoolDestroy(pool_));
    }
    PrimaryContextTest::TearDown();
  }

  // What cuMemGetInfo must report as free with `held` bytes allocated by the route under test.
  size_t expected_free(size_t held) const {
    if (under_shim()) return kBudget - held;
    return kDeviceMemory - (GetParam().driver_charges ? held : 0);
  }

  CUresult allocate(size_t bytes, Held& held) { return GetParam().allocate(*this, bytes, held); }
  CUresult release(Held& held) { return GetParam().release(*this, held); }

 private:

  CUstream stream_ = nullptr;
  CUmemoryPool pool_ = nullptr;
  routes::PerThreadExports per_thread_;
};

// Sizes used below are multiples of 2 MiB and of 64 KiB x 1024, so every route takes exactly
// what it is asked for (no pitch padding, no pool or VMM rounding) and the figures are exact.

CUresult free_stream_ordered(BudgetRoutes& test, Held& held) {
  if (const CUresult result = cuMemFreeAsync(held.pointer, test.stream()); result != CUDA_SUCCESS)
    return result;
  return cuStreamSynchronize(test.stream());
}

CUresult free_per_thread(BudgetRoutes& test, Held& held) {
  // Stream 0 through a _ptsz export is the calling thread's per-thread default stream.
  if (const CUresult result = test.per_thread().free_async(held.pointer, nullptr);
      result != CUDA_SUCCESS)
    return result;
  return cuStreamSynchronize(CU_STREAM_PER_THREAD);
}

CUDA_ARRAY_DESCRIPTOR array_2d(size_t bytes) {
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = bytes / (1024 * 4);
  d.Height = 1024;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;
  return d;
}

CUDA_ARRAY3D_DESCRIPTOR array_3d(size_t bytes) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = bytes / (64 * 64 * 4);
  d.Height = 64;
  d.Depth = 64;
  d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d.NumChannels = 4;
  return d;
}

const Route kRoutes[] = {
    {"cuMemAlloc", true,
     [](BudgetRoutes&, size_t bytes, Held& held) { return cuMemAlloc(&held.pointer, bytes); },
     [](BudgetRoutes&, Held& held) { return cuMemFree(held.pointer); }},
    {"cuMemAllocPitch", true,
     [](BudgetRoutes&, size_t bytes, Held& held) {
       size_t pitch = 0;
       const CUresult result = cuMemAllocPitch(&held.pointer, &pitch, bytes / 1024, 1024, 4);
       if (result == CUDA_SUCCESS) {
         EXPECT_EQ(pitch, bytes / 1024);
       }
       return result;
     },
     [](BudgetRoutes&, Held& held) { return cuMemFree(held.pointer); }},
    {"cuMemAllocManaged", false,
     [](BudgetRoutes&, size_t bytes, Held& held) {
       return cuMemAllocManaged(&held.pointer, bytes, CU_MEM_ATTACH_GLOBAL);
     },
     [](BudgetRoutes&, Held& held) { return cuMemFree(held.pointer); }},
    {"cuMemAllocAsync", true,
     [](BudgetRoutes& test, size_t bytes, Held& held) {
       return cuMemAllocAsync(&held.pointer, bytes, test.stream());
     },
     free_stream_ordered},
    {"cuMemAllocAsync_ptsz", true,
     [](BudgetRoutes& test, size_t bytes, Held& held) {
       return test.per_thread().alloc_async(&held.pointer, bytes, nullptr);
     },
     free_per_thread},
    {"cuMemAllocFromPoolAsync", true,
     [](BudgetRoutes& test, size_t bytes, Held& held) {
       return cuMemAllocFromPoolAsync(&held.pointer, bytes, test.pool(), test.stream());
     },
     free_stream_ordered},
    {"cuMemAllocFromPoolAsync_ptsz", true,
     [](BudgetRoutes& test, size_t bytes, Held& held) {
       return test.per_thread().alloc_from_pool_async(&held.pointer, bytes, test.pool(), nullptr);
     },
     free_per_thread},
    {"cuMemCreate", true,
     [](BudgetRoutes& test, size_t bytes, Held& held) {
       CUmemAllocationProp prop{};
       prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
       prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, test.device()};
       return cuMemCreate(&held.handle, bytes, &prop, 0);
     },
     [](BudgetRoutes&, Held& held) { return cuMemRelease(held.handle); }},
    {"cuArrayCreate", true,
     [](BudgetRoutes&, size_t bytes, Held& held) {
       const CUDA_ARRAY_DESCRIPTOR d = array_2d(bytes);
       return cuArrayCreate(&held.array, &d);
     },
     [](BudgetRoutes&, Held& held) { return cuArrayDestroy(held.array); }},
    {"cuArray3DCreate", true,
     [](BudgetRoutes&, size_t bytes, Held& held) {
       const CUDA_ARRAY3D_DESCRIPTOR d = array_3d(bytes);
       return cuArray3DCreate(&held.array, &d);
     },
     [](BudgetRoutes&, Held& held) { return cuArrayDestroy(held.array); }},
};

// 512 MiB: twice the budget, half the device.
TEST_P(BudgetRoutes, OverBudgetIsRefusedOnlyUnderTheShim) {
  Held held;
  const CUresult result = allocate(512 * kMiB, held);
  if (under_shim()) {
    EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(free_bytes(), kBudget);  // a refusal holds nothing
  } else {
    ASSERT_CU(result);
    EXPECT_EQ(free_bytes(), expected_free(512 * kMiB));
    ASSERT_CU(release(held));
    EXPECT_EQ(free_bytes(), kDeviceMemory);
  }
}

// 200 MiB, then 200 MiB more while the first is held (over the budget), then free and again:
// a free gives its bytes back to the budget.
TEST_P(BudgetRoutes, FreedBytesReturnToTheBudget) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Held first;
    ASSERT_CU(allocate(200 * kMiB, first));
    EXPECT_EQ(free_bytes(), expected_free(200 * kMiB));
    Held second;
    const CUresult result = allocate(200 * kMiB, second);
    if (under_shim()) {
      EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
    } else {
      ASSERT_CU(result);
      EXPECT_EQ(free_bytes(), expected_free(400 * kMiB));
      ASSERT_CU(release(second));
    }
    EXPECT_EQ(free_bytes(), expected_free(200 * kMiB));
    ASSERT_CU(release(first));
    EXPECT_EQ(free_bytes(), expected_free(0));
  }
}

// Allocations that fit succeed, up to exactly the budget; cuMemGetInfo follows each one.
TEST_P(BudgetRoutes, AllocationsUpToTheBudgetSucceed) {
  std::vector<Held> held(4);
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_CU(allocate(64 * kMiB, held[i])) << "allocation " << i;
    EXPECT_EQ(free_bytes(), expected_free((i + 1) * 64 * kMiB));
  }
  Held one_more;
  const CUresult result = allocate(2 * kMiB, one_more);
  if (under_shim()) {
    EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(free_bytes(), 0u);
  } else {
    ASSERT_CU(result);
    ASSERT_CU(release(one_more));
  }
  for (Held& each : held) {
    ASSERT_CU(release(each));
  }
  EXPECT_EQ(free_bytes(), expected_free(0));
}

INSTANTIATE_TEST_SUITE_P(EveryRoute, BudgetRoutes, ::testing::ValuesIn(kRoutes),
                         [](const ::testing::TestParamInfo<Route>& param) {
                           return std::string(param.param.name);
                         });

// Tests that use several routes at once.
class BudgetAcrossRoutes : public BudgetRoutes {};

// 40 MiB by each route at once: one budget for all of them.
TEST_P(BudgetAcrossRoutes, AllRoutesShareOneBudget) {
  // Runs once; the parameter is only the fixture's.
  std::vector<std::pair<const Route*, Held>> held;
  size_t total = 0;
  size_t charged = 0;
  for (const Route& route : kRoutes) {
    if (total + 40 * kMiB > kBudget) break;
    Held each;
    ASSERT_CU(route.allocate(*this, 40 * kMiB, each)) << route.name;
    held.emplace_back(&route, each);
    total += 40 * kMiB;
    if (route.driver_charges) charged += 40 * kMiB;
    EXPECT_EQ(free_bytes(), under_shim() ? kBudget - total : kDeviceMemory - charged)
        << "after " << route.name;
  }
  ASSERT_EQ(total, 240 * kMiB);
  // 16 MiB are left under the budget: 18 MiB is refused by every route, 16 MiB fits.
  for (const Route& route : kRoutes) {
    Held extra;
    const CUresult result = route.allocate(*this, 18 * kMiB, extra);
    if (under_shim()) {
      EXPECT_EQ(result, CUDA_ERROR_OUT_OF_MEMORY) << route.name;
    } else {
      ASSERT_CU(result) << route.name;
      ASSERT_CU(route.release(*this, extra)) << route.name;
    }
  }
  Held last;
  ASSERT_CU(cuMemAlloc(&last.pointer, 16 * kMiB));
  if (under_shim()) {
    EXPECT_EQ(free_bytes(), 0u);
  }
  ASSERT_CU(cuMemFree(last.pointer));
  for (auto& [route, each] : held) {
    ASSERT_CU(route->release(*this, each)) << route->name;
  }
  EXPECT_EQ(free_bytes(), under_shim() ? kBudget : kDeviceMemory);
}

// cuMemAllocPitch takes pitch x height, which may exceed what was admitted (the request). The
// free figure then bottoms out at 0 rather than wrapping around.
TEST_P(BudgetAcrossRoutes, MemGetInfoNeverUnderflows) {
  Held almost_all;
  ASSERT_CU(cuMemAlloc(&almost_all.pointer, kBudget - 64 * 1024));
  // 1 byte wide rows: admitted as 1 KiB, taken as 1024 rows of a 512-byte pitch (512 KiB).
  Held padded;
  size_t pitch = 0;
  ASSERT_CU(cuMemAllocPitch(&padded.pointer, &pitch, 1, 1024, 4));
  EXPECT_EQ(pitch, 512u);
  if (under_shim()) {
    EXPECT_EQ(free_bytes(), 0u);
    Held nothing_fits;
    EXPECT_EQ(cuMemAlloc(&nothing_fits.pointer, 1), CUDA_ERROR_OUT_OF_MEMORY);
  }
  ASSERT_CU(cuMemFree(padded.pointer));
  EXPECT_EQ(free_bytes(), under_shim() ? 64 * 1024 : kDeviceMemory - (kBudget - 64 * 1024));
  ASSERT_CU(cuMemFree(almost_all.pointer));
}

// Under the shim, cuMemGetInfo counts the bytes asked for, not the driver's page rounding.
TEST_P(BudgetAcrossRoutes, MemGetInfoIsExactToTheByte) {
  Held odd;
  ASSERT_CU(cuMemAlloc(&odd.pointer, 1000));
  if (under_shim()) {
    EXPECT_EQ(free_bytes(), kBudget - 1000);
  }
  ASSERT_CU(cuMemFree(odd.pointer));
  EXPECT_EQ(free_bytes(), under_shim() ? kBudget : kDeviceMemory);
}

// The program links libcuda, so the global scope has the driver's names; the preloaded shim's
// definitions come first in it. (Programs that link libcuda call the hooks directly.)
TEST_P(BudgetAcrossRoutes, GlobalScopeLookupsFindTheHooks) {
  for (const char* name : {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuArrayCreate_v2",
                           "cuMemAllocAsync_ptsz", "cuGetProcAddress_v2"}) {
    EXPECT_TRUE(is_export(dlsym(RTLD_DEFAULT, name), name, under_shim()));
  }
  // Not hooked: the driver's, either way.
  EXPECT_TRUE(is_export(dlsym(RTLD_DEFAULT, "cuDeviceGetCount"), "cuDeviceGetCount", false));
}

// A sparse or deferred-mapping array owns no memory until tile-pool handles (charged as the
// cuMemCreate handles they are) are mapped into it: the shim charges nothing and the answer is
// the driver's, under the budget or past it (simcuda implements neither kind: NOT_SUPPORTED).
TEST_P(BudgetAcrossRoutes, ArraysThatOwnNoMemoryAreTheDriversToAnswer) {
  for (const unsigned int flags : {CUDA_ARRAY3D_SPARSE, CUDA_ARRAY3D_DEFERRED_MAPPING}) {
    CUDA_ARRAY3D_DESCRIPTOR d = array_3d(512 * kMiB);
    d.Flags = flags;
    CUarray array = nullptr;
    EXPECT_EQ(cuArray3DCreate(&array, &d), CUDA_ERROR_NOT_SUPPORTED) << "flags " << flags;
    CUmipmappedArray mipmapped = nullptr;
    EXPECT_EQ(cuMipmappedArrayCreate(&mipmapped, &d, 2), CUDA_ERROR_NOT_SUPPORTED)
        << "flags " << flags;
  }
  EXPECT_EQ(free_bytes(), under_shim() ? kBudget : kDeviceMemory);
}

INSTANTIATE_TEST_SUITE_P(Once, BudgetAcrossRoutes, ::testing::Values(kRoutes[0]),
                         [](const ::testing::TestParamInfo<Route>&) {
                           return std::string("mixed");
                         });

}  // namespace
