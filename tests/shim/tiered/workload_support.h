// What the programs that drive tiered mode on simcuda share (hot_set_workload, policy_workloads,
// rules_program, two_streams_workload): a driver call checked and named on failure, and device 0
// opened with simcuda's kernels.
#pragma once

#include <cuda.h>

#include <cstdio>

namespace workload_support {

// Whether `result` is success; if not, says on standard error which call of `program` failed.
inline bool check(const char* program, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "%s: %s failed: %d\n", program, what, static_cast<int>(result));
  return false;
}

// Initialises the driver and makes device 0's primary context current; with `module`, loads
// simcuda's kernels into it (simcuda accepts any image).
inline CUresult open_device(CUcontext* context, CUmodule* module) {
  CUdevice device = 0;
  if (const CUresult result = cuInit(0); result != CUDA_SUCCESS) return result;
  if (const CUresult result = cuDeviceGet(&device, 0); result != CUDA_SUCCESS) return result;
  if (const CUresult result = cuDevicePrimaryCtxRetain(context, device); result != CUDA_SUCCESS)
    return result;
  if (const CUresult result = cuCtxSetCurrent(*context); result != CUDA_SUCCESS) return result;
  return module != nullptr ? cuModuleLoadData(module, "simcuda accepts any image") : CUDA_SUCCESS;
}

}  // namespace workload_support

// Returns `failed` from the calling function when `call` fails, naming it (with the program's
// kProgram).
#define WORKLOAD_CHECK(call, failed)                                      \
  do {                                                                    \
    if (!workload_support::check(kProgram, (call), #call)) return failed; \
  } while (0)
