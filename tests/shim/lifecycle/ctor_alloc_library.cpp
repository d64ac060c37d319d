// A shared library whose constructor uses the driver before the program's main() runs: the
// shim's first hooked call then happens inside another library's initialiser (Note [Entering
// the shim]). It records what it saw; ctor_alloc_program prints it.
#include <cuda.h>

#include <cstddef>

extern "C" {

struct CtorAllocReport {
  CUresult init = CUDA_ERROR_UNKNOWN;
  CUresult small_alloc = CUDA_ERROR_UNKNOWN;  // 16 MiB
  CUresult big_alloc = CUDA_ERROR_UNKNOWN;    // 128 MiB
  CUresult small_free = CUDA_ERROR_UNKNOWN;
  size_t free_with_small = 0;  // cuMemGetInfo while the 16 MiB are held
  size_t total = 0;
};

__attribute__((visibility("default"))) CtorAllocReport ctor_alloc_report;

__attribute__((constructor)) static void allocate_in_constructor() {
  CtorAllocReport& report = ctor_alloc_report;
  report.init = cuInit(0);
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (report.init != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS)
    return;
  CUdeviceptr small = 0;
  CUdeviceptr big = 0;
  report.small_alloc = cuMemAlloc(&small, size_t{16} << 20);
  cuMemGetInfo(&report.free_with_small, &report.total);
  report.big_alloc = cuMemAlloc(&big, size_t{128} << 20);
  if (report.big_alloc == CUDA_SUCCESS) cuMemFree(big);
  if (report.small_alloc == CUDA_SUCCESS) report.small_free = cuMemFree(small);
}

}  // extern "C"
