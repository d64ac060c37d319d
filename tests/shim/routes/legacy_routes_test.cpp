// The 32-bit ABI of CUDA 2.0 (cuMemAlloc, cuMemAllocPitch and cuMemFree without _v2), which
// drivers still export and a lookup at version 2000 answers. Under the shim each is its own hook,
// never the _v2 one (whose arguments differ), and holds the budget; without the preload each is
// the driver's.
//
// simcuda places no legacy allocation (Note [Legacy allocations have no 32-bit address] in
// tools/simcuda/src/api/legacy_memory.cpp), so "succeeds without the shim" cannot be shown here;
// what can: a request over the budget is refused by the shim itself, logged and never spilled
// (CMakeLists.txt runs this program again with spilling on and checks the log), and a request
// the driver refuses leaves the budget as it was.
#include <string>

#include "routes_support.h"

namespace {

using routes::is_export;
using routes::kBudget;
using routes::kMiB;
using routes::under_shim;

using LegacyAlloc = CUresult(CUDAAPI*)(unsigned int* dptr, unsigned int bytesize);
using LegacyAllocPitch = CUresult(CUDAAPI*)(unsigned int* dptr, unsigned int* pitch,
                                            unsigned int width_in_bytes, unsigned int height,
                                            unsigned int element_size_bytes);
using LegacyFree = CUresult(CUDAAPI*)(unsigned int dptr);

class LegacyRoutes : public routes::PrimaryContextTest<> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(PrimaryContextTest::SetUp());
    alloc_ = reinterpret_cast<LegacyAlloc>(look_up("cuMemAlloc", 2000));
    alloc_pitch_ = reinterpret_cast<LegacyAllocPitch>(look_up("cuMemAllocPitch", 2000));
    free_ = reinterpret_cast<LegacyFree>(look_up("cuMemFree", 2000));
    ASSERT_TRUE(alloc_ != nullptr && alloc_pitch_ != nullptr && free_ != nullptr);
  }

  // cuGetProcAddress as a program built for CUDA 2.0 asks (the call is the shim's hook when
  // preloaded: the program links libcuda).
  static void* look_up(const char* name, int version) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult status{};
    EXPECT_CU(cuGetProcAddress(name, &function, version, 0, &status)) << name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    return function;
  }

  LegacyAlloc alloc_ = nullptr;
  LegacyAllocPitch alloc_pitch_ = nullptr;
  LegacyFree free_ = nullptr;
};

// Version 2000 answers the 32-bit exports: the shim's hook for exactly that export under the
// shim, never the _v2 hook; version 3020 the _v2 ones.
TEST_F(LegacyRoutes, LookupsAtVersion2000AnswerThe32BitHooks) {
  for (const char* name : {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(is_export(look_up(name, 2000), name, under_shim()));
    EXPECT_TRUE(is_export(look_up(name, 3020), std::string(name) + "_v2", under_shim()));
    // An old binary binds the unversioned name itself.
    EXPECT_TRUE(is_export(dlsym(RTLD_DEFAULT, name), name, under_shim()));
  }
}

// 512 MiB, twice the budget: under the shim the refusal is the shim's own (CMakeLists.txt checks
// that it is logged, and that it is refused even where spilling is on); on simcuda the driver
// refuses it too. Nothing is held either way.
TEST_F(LegacyRoutes, OverBudgetIsOutOfMemoryAndHoldsNothing) {
  const size_t before = free_bytes();
  unsigned int pointer = 0;
  unsigned int pitch = 0;
  EXPECT_EQ(alloc_(&pointer, 512 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(alloc_pitch_(&pointer, &pitch, 512 * 1024, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(pointer, 0u);
  EXPECT_EQ(free_bytes(), before);
  if (under_shim()) {
    EXPECT_EQ(before, kBudget);
  }
}

// Within the budget the shim admits the request and calls the driver; the driver's refusal
// cancels the admission, and its argument errors come through unchanged.
TEST_F(LegacyRoutes, TheDriversAnswersComeThrough) {
  const size_t before = free_bytes();
  unsigned int pointer = 0;
  unsigned int pitch = 0;
  EXPECT_EQ(alloc_(&pointer, 64 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(alloc_pitch_(&pointer, &pitch, 64 * 1024, 1024, 4), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(free_bytes(), before);
  EXPECT_EQ(alloc_(nullptr, 64 * kMiB), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(alloc_(&pointer, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(alloc_pitch_(&pointer, &pitch, 1024, 1024, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(free_(0));
  EXPECT_EQ(free_(0x10000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(free_bytes(), before);
}

}  // namespace
