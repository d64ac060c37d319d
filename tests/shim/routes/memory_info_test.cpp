// cuMemGetInfo under each [report] memory_info choice (hooks/memory_info_hooks.cpp). Run by
// CMakeLists.txt once per choice, on simcuda's 1 GiB device with a 256 MiB budget and a 1 GiB
// host limit; MEMORY_INFO names the choice the run expects.
#include <cstdlib>
#include <string_view>

#include "routes_support.h"

namespace {

using routes::kBudget;
using routes::kDeviceMemory;
using routes::kGiB;
using routes::kMiB;

constexpr size_t kHostLimit = kGiB;

std::string_view expected_choice() {
  const char* choice = std::getenv("MEMORY_INFO");
  return choice != nullptr ? choice : "";
}

class MemoryInfo : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(routes::check_mode());
    ASSERT_TRUE(routes::under_shim());
    ASSERT_CU(cuInit(0));
    CUdevice device = 0;
    ASSERT_CU(cuDeviceGet(&device, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, device));
    ASSERT_CU(cuCtxSetCurrent(context_));
  }
  void TearDown() override {
    if (context_ != nullptr) {
      EXPECT_CU(cuDevicePrimaryCtxRelease(0));
    }
  }

  CUcontext context_ = nullptr;
};

TEST_F(MemoryInfo, ReportsWhatTheChoiceSays) {
  CUdeviceptr held = 0;
  ASSERT_CU(cuMemAlloc(&held, 100 * kMiB));
  size_t free = 0;
  size_t total = 0;
  ASSERT_CU(cuMemGetInfo(&free, &total));
  const std::string_view choice = expected_choice();
  if (choice == "budget") {
    EXPECT_EQ(total, kBudget);
    EXPECT_EQ(free, kBudget - 100 * kMiB);
  } else if (choice == "physical") {
    EXPECT_EQ(total, kDeviceMemory);
    EXPECT_EQ(free, kDeviceMemory - 100 * kMiB);
  } else if (choice == "virtual") {
    EXPECT_EQ(total, kBudget + kHostLimit);
    EXPECT_EQ(free, kBudget - 100 * kMiB + kHostLimit);
  } else {
    FAIL() << "MEMORY_INFO must be budget, physical or virtual, not '" << choice << "'";
  }
  ASSERT_CU(cuMemFree(held));
}

}  // namespace
