// Managed spills are advised as [spill] managed_location and managed_accessed_by say (README,
// "Spilling"): the driver's own range attributes of a spilled block must show the advice. Each
// ctest sets the options and ADVICE_EXPECT_LOCATION (host, device or none) and
// ADVICE_EXPECT_ACCESSED_BY (1 or 0).
#include <cstdlib>
#include <string_view>

#include "spill_support.h"

namespace {

using spill::kBlock;
using spill::Tier;

class ManagedAdvice : public spill::SpillTest {};

int expected_preferred_location(CUdevice device) {
  const char* expected = std::getenv("ADVICE_EXPECT_LOCATION");
  EXPECT_NE(expected, nullptr) << "ADVICE_EXPECT_LOCATION is not set";
  const std::string_view location = expected != nullptr ? expected : "";
  if (location == "host") return CU_DEVICE_CPU;
  if (location == "device") return device;
  return CU_DEVICE_INVALID;  // no preferred location
}

TEST_F(ManagedAdvice, SpilledBlocksCarryTheConfiguredAdvice) {
  std::vector<CUdeviceptr> device_blocks;
  ASSERT_NO_FATAL_FAILURE(fill_device(device_blocks));
  CUdeviceptr spilled = 0;
  ASSERT_CU(cuMemAlloc(&spilled, kBlock));
  ASSERT_EQ(spill::tier_of(spilled), Tier::kManaged);
  CUdevice device = 0;
  ASSERT_CU(cuCtxGetDevice(&device));

  int preferred = 0;
  ASSERT_CU(cuMemRangeGetAttribute(&preferred, sizeof preferred,
                                   CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, spilled, kBlock));
  EXPECT_EQ(preferred, expected_preferred_location(device));

  int accessed_by[4] = {CU_DEVICE_INVALID, CU_DEVICE_INVALID, CU_DEVICE_INVALID,
                        CU_DEVICE_INVALID};
  ASSERT_CU(cuMemRangeGetAttribute(accessed_by, sizeof accessed_by,
                                   CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, spilled, kBlock));
  const char* expect_accessed = std::getenv("ADVICE_EXPECT_ACCESSED_BY");
  ASSERT_NE(expect_accessed, nullptr) << "ADVICE_EXPECT_ACCESSED_BY is not set";
  if (std::string_view(expect_accessed) == "1") {
    EXPECT_EQ(accessed_by[0], device);
  } else {
    EXPECT_EQ(accessed_by[0], CU_DEVICE_INVALID);
  }
  EXPECT_CU(cuMemFree(spilled));
  free_all(device_blocks);
}

}  // namespace
