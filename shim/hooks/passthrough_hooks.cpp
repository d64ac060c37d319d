// Launches and copies: forwarded untouched, one relaxed load and an indirect call each, so a
// program pays nothing measurable for them. They are hooked now so that use tracking
// (shim/README.md, "Interception") can later see every submission without changing how programs
// reach the shim.
#include "hooks/hook.h"

#define VRAMSPILL_FORWARD(name, parameters, arguments) \
  VRAMSPILL_HOOK CUresult CUDAAPI name parameters {    \
    VRAMSPILL_REAL_OR_RETURN(real, name);              \
    return real arguments;                             \
  }

#define VRAMSPILL_LAUNCH_KERNEL(name)                                                           \
  VRAMSPILL_FORWARD(name,                                                                       \
                    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,                \
                     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,     \
                     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,     \
                     void** kernelParams, void** extra),                                        \
                    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,          \
                     sharedMemBytes, hStream, kernelParams, extra))
VRAMSPILL_LAUNCH_KERNEL(cuLaunchKernel)
VRAMSPILL_LAUNCH_KERNEL(cuLaunchKernel_ptsz)

#define VRAMSPILL_LAUNCH_KERNEL_EX(name)                                                      \
  VRAMSPILL_FORWARD(name, (const CUlaunchConfig* config, CUfunction f, void** kernelParams, \
                           void** extra),                                                     \
                    (config, f, kernelParams, extra))
VRAMSPILL_LAUNCH_KERNEL_EX(cuLaunchKernelEx)
VRAMSPILL_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz)

#define VRAMSPILL_COPY(name) \
  VRAMSPILL_FORWARD(name, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))
VRAMSPILL_COPY(cuMemcpy)
VRAMSPILL_COPY(cuMemcpy_ptds)
VRAMSPILL_COPY(cuMemcpyDtoD_v2)
VRAMSPILL_COPY(cuMemcpyDtoD_v2_ptds)

#define VRAMSPILL_COPY_ASYNC(name)                                                         \
  VRAMSPILL_FORWARD(name, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream), \
                    (dst, src, bytes, stream))
VRAMSPILL_COPY_ASYNC(cuMemcpyAsync)
VRAMSPILL_COPY_ASYNC(cuMemcpyAsync_ptsz)
VRAMSPILL_COPY_ASYNC(cuMemcpyDtoDAsync_v2)
VRAMSPILL_COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz)

#define VRAMSPILL_COPY_TO_DEVICE(name, ...)                                                     \
  VRAMSPILL_FORWARD(name, (CUdeviceptr dst, const void* src, size_t bytes __VA_OPT__(, ) __VA_ARGS__), \
                    (dst, src, bytes __VA_OPT__(, stream)))
VRAMSPILL_COPY_TO_DEVICE(cuMemcpyHtoD_v2)
VRAMSPILL_COPY_TO_DEVICE(cuMemcpyHtoD_v2_ptds)
VRAMSPILL_COPY_TO_DEVICE(cuMemcpyHtoDAsync_v2, CUstream stream)
VRAMSPILL_COPY_TO_DEVICE(cuMemcpyHtoDAsync_v2_ptsz, CUstream stream)

#define VRAMSPILL_COPY_TO_HOST(name, ...)                                                       \
  VRAMSPILL_FORWARD(name, (void* dst, CUdeviceptr src, size_t bytes __VA_OPT__(, ) __VA_ARGS__), \
                    (dst, src, bytes __VA_OPT__(, stream)))
VRAMSPILL_COPY_TO_HOST(cuMemcpyDtoH_v2)
VRAMSPILL_COPY_TO_HOST(cuMemcpyDtoH_v2_ptds)
VRAMSPILL_COPY_TO_HOST(cuMemcpyDtoHAsync_v2, CUstream stream)
VRAMSPILL_COPY_TO_HOST(cuMemcpyDtoHAsync_v2_ptsz, CUstream stream)
