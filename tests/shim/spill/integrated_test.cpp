// On an integrated device (SIMCUDA_ATTRS=INTEGRATED=1, CMakeLists.txt) the budget holds and
// nothing spills, by any route (Note [Integrated devices] in shim/hooks/devices.h).
#include "spill_support.h"

namespace {

using spill::kBlock;

class Integrated : public spill::SpillTest {};

TEST_F(Integrated, HoldsTheBudgetWithoutSpilling) {
  ASSERT_TRUE(spill::spilling_off()) << "SPILL_EXPECT must be off: nothing may spill";
  std::vector<CUdeviceptr> held;
  ASSERT_NO_FATAL_FAILURE(fill_device(held));
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc(&pointer, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocManaged(&pointer, kBlock, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAllocAsync(&pointer, kBlock, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  free_all(held);
  EXPECT_EQ(free_bytes(), budget_);
}

}  // namespace
