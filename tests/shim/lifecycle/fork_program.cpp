// After fork the shim is pass-through (Note [Entering the shim]): its ledger describes the
// parent's memory. Run with a budget of 64 MiB: the parent fills it and is refused beyond it;
// the forked child allocates more and the shim must leave the answer to the driver, show it the
// driver's own cuMemGetInfo, and write no exit summary. Prints what each process saw.
#include <sys/wait.h>
#include <unistd.h>

#include "program_support.h"

using vramspill::testing::kMiB;
using vramspill::testing::real_driver_function;

int main() {
  vramspill::testing::init_primary_context();
  using Alloc = CUresult (*)(CUdeviceptr*, size_t);
  using Free = CUresult (*)(CUdeviceptr);
  using MemGetInfo = CUresult (*)(size_t*, size_t*);
  const auto real_alloc = real_driver_function<Alloc>("cuMemAlloc_v2");
  const auto real_free = real_driver_function<Free>("cuMemFree_v2");
  const auto real_get_info = real_driver_function<MemGetInfo>("cuMemGetInfo_v2");

  CUdeviceptr held = 0;
  CHECK_CU(cuMemAlloc(&held, 48 * kMiB));
  CUdeviceptr extra = 0;
  const CUresult parent_over = cuMemAlloc(&extra, 32 * kMiB);
  size_t free = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&free, &total));
  std::printf("parent: over_budget_alloc=%d free_mib=%zu total_mib=%zu\n", parent_over, free / kMiB,
              total / kMiB);
  std::fflush(stdout);

  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    // The same request through the hook and straight to the driver: the shim must answer as
    // the driver does (whatever simcuda makes of a forked child).
    CUdeviceptr hooked = 0;
    CUdeviceptr direct = 0;
    const CUresult through_hook = cuMemAlloc(&hooked, 32 * kMiB);
    const CUresult to_driver = real_alloc(&direct, 32 * kMiB);
    size_t hook_free = 0, hook_total = 0, driver_free = 0, driver_total = 0;
    const CUresult hook_info = cuMemGetInfo(&hook_free, &hook_total);
    const CUresult driver_info = real_get_info(&driver_free, &driver_total);
    std::printf(
        "child: hooked_alloc=%d driver_alloc=%d hooked_info=%d driver_info=%d "
        "hooked_total_mib=%zu driver_total_mib=%zu same_free=%s\n",
        through_hook, to_driver, hook_info, driver_info, hook_total / kMiB, driver_total / kMiB,
        hook_free == driver_free ? "yes" : "no");
    if (through_hook == CUDA_SUCCESS) std::printf("child: hooked_free=%d\n", cuMemFree(hooked));
    if (to_driver == CUDA_SUCCESS) real_free(direct);
    std::fflush(stdout);
    std::exit(0);  // atexit handlers run: the shim's summary must not
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  std::printf("parent: child_exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  CHECK_CU(cuMemFree(held));
  CHECK_CU(cuMemGetInfo(&free, &total));
  std::printf("parent: after_free_mib=%zu\n", free / kMiB);
  return 0;
}
