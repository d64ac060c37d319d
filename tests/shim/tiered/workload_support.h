// What the programs that drive tiered mode on simcuda share (hot_set_workload, policy_workloads,
// rules_program, two_streams_workload, the stream-ordered workloads): a driver call checked and
// named on failure, device 0 opened with simcuda's kernels, launches of its fill and copy kernels
// over a block, and a block's words checked.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <vector>

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

// simcuda's vs_fill_u32 and vs_copy, launched over whole blocks.
struct BlockKernels {
  CUfunction fill = nullptr;
  CUfunction copy = nullptr;

  // Loads both from `module`.
  CUresult load(CUmodule module) {
    if (const CUresult result = cuModuleGetFunction(&fill, module, "vs_fill_u32");
        result != CUDA_SUCCESS)
      return result;
    return cuModuleGetFunction(&copy, module, "vs_copy");
  }
  // Every 32-bit word of the `bytes` at `block` becomes `value`.
  CUresult fill_block(CUdeviceptr block, size_t bytes, uint32_t value, CUstream stream) const {
    uint64_t count = bytes / sizeof(uint32_t);
    void* params[] = {&block, &value, &count};
    return cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  CUresult copy_block(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
                      CUstream stream) const {
    uint64_t count = bytes;
    void* params[] = {&destination, &source, &count};
    return cuLaunchKernel(copy, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
};

// Whether every 32-bit word of the `bytes` at `block` is `expected`, read through `words` (at
// least that large); if not, says on standard error which of `program`'s blocks (`what` and
// `index`) and word differ.
inline bool block_holds(const char* program, CUdeviceptr block, size_t bytes, uint32_t expected,
                        std::vector<uint32_t>& words, const char* what, size_t index) {
  if (cuMemcpyDtoH(words.data(), block, bytes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s: reading %s %zu failed\n", program, what, index);
    return false;
  }
  for (size_t i = 0; i < bytes / sizeof(uint32_t); ++i) {
    if (words[i] != expected) {
      std::fprintf(stderr, "%s: %s %zu holds %u at word %zu, expected %u\n", program, what, index,
                   words[i], i, expected);
      return false;
    }
  }
  return true;
}

}  // namespace workload_support

// Returns `failed` from the calling function when `call` fails, naming it (with the program's
// kProgram).
#define WORKLOAD_CHECK(call, failed)                                      \
  do {                                                                    \
    if (!workload_support::check(kProgram, (call), #call)) return failed; \
  } while (0)
