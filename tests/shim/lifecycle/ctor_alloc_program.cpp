// Linked to libctor_alloc.so (DT_NEEDED), whose constructor allocated before main(); prints what
// it saw, then allocates once more from main().
#include "program_support.h"

extern "C" {
struct CtorAllocReport {
  CUresult init;
  CUresult small_alloc;
  CUresult big_alloc;
  CUresult small_free;
  size_t free_with_small;
  size_t total;
};
extern CtorAllocReport ctor_alloc_report;
}

int main() {
  const CtorAllocReport& r = ctor_alloc_report;
  std::printf(
      "constructor: init=%d small=%d big=%d small_free=%d free_with_small_mib=%zu "
      "total_mib=%zu\n",
      r.init, r.small_alloc, r.big_alloc, r.small_free,
      r.free_with_small / vramspill::testing::kMiB, r.total / vramspill::testing::kMiB);
  CUdeviceptr pointer = 0;
  const CUresult later = cuMemAlloc(&pointer, 32 * vramspill::testing::kMiB);
  size_t free = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&free, &total));
  std::printf("main: alloc=%d free_mib=%zu\n", later, free / vramspill::testing::kMiB);
  if (later == CUDA_SUCCESS) CHECK_CU(cuMemFree(pointer));
  return 0;
}
