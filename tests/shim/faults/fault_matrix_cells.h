// The fault matrix's cells (README.md in this folder): each a driver function, the error injected
// into it, the [spill] mode, and the calls of that function to fail, one per run (SIMCUDA_FAIL's
// N). The calls were chosen from a clean run of faults_program traced with gdb (README.md says
// how): every call where a function has at most 12, otherwise the first call from each place in
// the shim and each hook that reaches it. `clean_calls` is how many calls that run made.
//
// A cell with a `finding` is a known bug (README.md's findings): its test is disabled until the
// bug is fixed, and its calls are the ones that show the bug.
#pragma once

#include <cuda.h>

#include <vector>

namespace faults {

enum class Spill { kAuto, kHost, kOff };

// What the program may see besides the injected call itself failing with the injected error.
enum class Outcome {
  kInjectedOnly,        // nothing: the shim copes, or the program's own call gets the error
  kSpillOutOfMemory,    // an allocation past the budget is CUDA_ERROR_OUT_OF_MEMORY: the spill
                        // tier failed (Note [What spills] in shim/placement/spill_placement.h)
  kStreamOrderedError,  // a stream-ordered call gets the injected error: the shim asked the
                        // driver about its stream, and the driver's answer is the program's
  kDeviceQueryError,    // an allocation or cuMemGetInfo gets the injected error: the shim could
                        // not tell its device (Note [A failed device query fails the request]
                        // in shim/hooks/devices.h)
};

struct FaultResult {
  CUresult value;
  const char* name;  // as SIMCUDA_FAIL takes it
};

struct Cell {
  const char* function;  // as SIMCUDA_FAIL names it
  FaultResult result;
  Spill spill;
  std::vector<int> calls;
  int clean_calls;
  Outcome outcome;
  const char* finding = nullptr;  // the known bug the cell shows (README.md)
};

#define FAULTS_RESULT(result) \
  FaultResult { result, #result }
inline constexpr FaultResult kOutOfMemory = FAULTS_RESULT(CUDA_ERROR_OUT_OF_MEMORY);
inline constexpr FaultResult kInvalidValue = FAULTS_RESULT(CUDA_ERROR_INVALID_VALUE);
inline constexpr FaultResult kInvalidContext = FAULTS_RESULT(CUDA_ERROR_INVALID_CONTEXT);
inline constexpr FaultResult kInvalidHandle = FAULTS_RESULT(CUDA_ERROR_INVALID_HANDLE);
inline constexpr FaultResult kInvalidDevice = FAULTS_RESULT(CUDA_ERROR_INVALID_DEVICE);
inline constexpr FaultResult kNotSupported = FAULTS_RESULT(CUDA_ERROR_NOT_SUPPORTED);
inline constexpr FaultResult kNotFound = FAULTS_RESULT(CUDA_ERROR_NOT_FOUND);
// Sticky errors: a kernel fault, as a synchronisation reports it.
inline constexpr FaultResult kIllegalAddress = FAULTS_RESULT(CUDA_ERROR_ILLEGAL_ADDRESS);
inline constexpr FaultResult kLaunchFailed = FAULTS_RESULT(CUDA_ERROR_LAUNCH_FAILED);
#undef FAULTS_RESULT

inline const std::vector<Cell>& cells() {
  using enum Spill;
  using enum Outcome;
  static const std::vector<Cell> table = {
      {"cuArray3DCreate_v2", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuArrayCreate_v2", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuArrayDestroy", kInvalidHandle, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuCtxGetCurrent", kInvalidContext, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuCtxGetDevice",
       kInvalidContext,
       kAuto,
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
       21,
       kDeviceQueryError},
      {"cuCtxPopCurrent_v2", kInvalidContext, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuCtxPushCurrent_v2", kInvalidContext, kAuto, {1, 2, 3, 4, 5}, 5, kSpillOutOfMemory},
      {"cuCtxSynchronize", kIllegalAddress, kAuto, {1}, 1, kInjectedOnly},
      {"cuCtxSynchronize", kLaunchFailed, kAuto, {1}, 1, kInjectedOnly},
      {"cuDeviceGet", kInvalidDevice, kAuto, {1, 2, 3}, 3, kInjectedOnly},
      {"cuDeviceGetAttribute", kInvalidValue, kAuto, {1, 2, 3, 4, 5, 6}, 6, kSpillOutOfMemory},
      {"cuDeviceGetCount", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuDeviceGetDefaultMemPool", kInvalidDevice, kAuto, {1}, 1, kInjectedOnly},
      {"cuDeviceGetMemPool", kInvalidValue, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuDeviceGetMemPool", kNotSupported, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuDevicePrimaryCtxRelease_v2", kInvalidContext, kAuto, {1}, 1, kInjectedOnly},
      {"cuDevicePrimaryCtxRetain", kOutOfMemory, kAuto, {1}, 1, kSpillOutOfMemory},
      {"cuDevicePrimaryCtxRetain", kInvalidDevice, kAuto, {1}, 1, kSpillOutOfMemory},
      {"cuDeviceTotalMem_v2", kInvalidDevice, kAuto, {1, 2}, 3, kInjectedOnly},
      {"cuDeviceTotalMem_v2", kInvalidDevice, kAuto, {3}, 3, kDeviceQueryError},
      {"cuGetProcAddress", kNotFound, kAuto, {1}, 1, kInjectedOnly},
      {"cuGetProcAddress_v2", kNotFound, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuInit", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuIpcGetMemHandle", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuLaunchHostFunc", kOutOfMemory, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuLaunchHostFunc", kIllegalAddress, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuLaunchKernel", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAdvise_v2", kInvalidValue, kAuto, {1, 3, 5, 7, 9, 11, 13}, 16, kInjectedOnly},
      {"cuMemAdvise_v2", kNotSupported, kAuto, {1, 3, 5, 7, 9, 11, 13}, 16, kInjectedOnly},
      {"cuMemAlloc", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocAsync", kOutOfMemory, kAuto, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemAllocAsync", kInvalidHandle, kAuto, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemAllocAsync_ptsz", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync_ptsz", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocHost_v2", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocManaged", kOutOfMemory, kAuto, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 9, kSpillOutOfMemory},
      {"cuMemAllocManaged",
       kNotSupported,
       kAuto,
       {1, 2, 3, 4, 5, 6, 7, 8, 9},
       9,
       kSpillOutOfMemory},
      {"cuMemAllocPitch", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocPitch_v2", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAllocPitch_v2", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemAlloc_v2", kOutOfMemory, kAuto, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemAlloc_v2", kInvalidValue, kAuto, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemCreate", kOutOfMemory, kAuto, {1}, 2, kInjectedOnly},
      // The shim's own cuMemCreate of a host-located handle (Note [Host-located VMM spills]).
      {"cuMemCreate", kOutOfMemory, kAuto, {2}, 2, kSpillOutOfMemory},
      {"cuMemCreate", kInvalidValue, kAuto, {1}, 2, kInjectedOnly},
      {"cuMemCreate", kInvalidValue, kAuto, {2}, 2, kSpillOutOfMemory},
      {"cuMemFree", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemFreeAsync", kInvalidValue, kAuto, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemFreeAsync", kIllegalAddress, kAuto, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemFreeAsync_ptsz", kIllegalAddress, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemFreeHost", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemFree_v2", kInvalidValue, kAuto, {1, 4, 7}, 13, kInjectedOnly},
      {"cuMemFree_v2", kIllegalAddress, kAuto, {1, 4, 7}, 13, kInjectedOnly},
      {"cuMemGetAddressRange_v2", kNotFound, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemGetInfo_v2", kInvalidContext, kAuto, {1, 2, 3, 4, 5}, 5, kInjectedOnly},
      {"cuMemHostAlloc", kOutOfMemory, kAuto, {1}, 1, kSpillOutOfMemory},
      {"cuMemHostRegister_v2", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemHostUnregister", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemMap", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemPoolCreate", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemPoolDestroy", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemPoolGetAttribute",
       kInvalidValue,
       kAuto,
       {1, 5, 9, 13, 17, 19, 21, 23, 25, 29, 33, 37, 47, 54, 55, 57, 59, 61, 63, 65, 67, 71},
       79,
       kInjectedOnly},
      {"cuMemPoolTrimTo", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemRelease", kInvalidValue, kAuto, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemRetainAllocationHandle", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemUnmap", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuMemcpyDtoD_v2", kInvalidValue, kAuto, {1}, 1, kInjectedOnly},
      {"cuMemcpyDtoHAsync_v2", kInvalidValue, kAuto, {1}, 17, kInjectedOnly},
      {"cuMemcpyDtoH_v2", kIllegalAddress, kAuto, {1}, 18, kInjectedOnly},
      {"cuMemcpyHtoDAsync_v2", kInvalidValue, kAuto, {1}, 17, kInjectedOnly},
      {"cuMemcpyHtoD_v2", kInvalidValue, kAuto, {1}, 17, kInjectedOnly},
      {"cuMipmappedArrayCreate", kOutOfMemory, kAuto, {1}, 1, kInjectedOnly},
      {"cuMipmappedArrayDestroy", kInvalidHandle, kAuto, {1}, 1, kInjectedOnly},
      {"cuPointerGetAttribute", kInvalidValue, kAuto, {1}, 33, kInjectedOnly},
      {"cuPointerGetAttributes", kInvalidValue, kAuto, {1, 2}, 2, kInjectedOnly},
      {"cuStreamGetDevice", kInvalidHandle, kAuto, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuStreamIsCapturing",
       kInvalidHandle,
       kAuto,
       {1, 2, 3, 4, 6, 7, 8, 9, 10, 11},
       11,
       kStreamOrderedError},
      {"cuStreamIsCapturing", kInvalidHandle, kAuto, {5}, 11, kStreamOrderedError},
      {"cuStreamIsCapturing",
       kIllegalAddress,
       kAuto,
       {1, 2, 3, 4, 6, 7, 8, 9, 10, 11},
       11,
       kStreamOrderedError},
      {"cuStreamIsCapturing", kIllegalAddress, kAuto, {5}, 11, kStreamOrderedError},
      {"cuStreamSynchronize", kIllegalAddress, kAuto, {1, 11}, 40, kInjectedOnly},
      {"cuStreamSynchronize", kLaunchFailed, kAuto, {1, 11}, 40, kInjectedOnly},
      {"cuArray3DCreate_v2", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuArrayCreate_v2", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuArrayDestroy", kInvalidHandle, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuCtxGetCurrent", kInvalidContext, kHost, {1}, 1, kInjectedOnly},
      {"cuCtxGetDevice",
       kInvalidContext,
       kHost,
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 21},
       23,
       kDeviceQueryError},
      {"cuCtxPopCurrent_v2", kInvalidContext, kHost, {7}, 7, kInjectedOnly},
      {"cuCtxPopCurrent_v2", kInvalidContext, kHost, {1, 2, 3, 4, 5, 6}, 7, kInjectedOnly, "F7"},
      {"cuCtxPushCurrent_v2", kInvalidContext, kHost, {1, 2, 3, 4, 5, 6}, 6, kSpillOutOfMemory},
      {"cuCtxSynchronize", kIllegalAddress, kHost, {1, 2, 3}, 3, kInjectedOnly},
      {"cuCtxSynchronize", kLaunchFailed, kHost, {1, 2, 3}, 3, kInjectedOnly},
      {"cuDeviceGet", kInvalidDevice, kHost, {1, 2, 3}, 3, kInjectedOnly},
      {"cuDeviceGetAttribute", kInvalidValue, kHost, {1, 2, 3, 4}, 4, kSpillOutOfMemory},
      {"cuDeviceGetCount", kInvalidValue, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuDeviceGetDefaultMemPool", kInvalidDevice, kHost, {1}, 1, kInjectedOnly},
      {"cuDeviceGetMemPool", kInvalidValue, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuDeviceGetMemPool", kNotSupported, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuDevicePrimaryCtxRelease_v2", kInvalidContext, kHost, {1}, 1, kInjectedOnly},
      {"cuDevicePrimaryCtxRetain", kOutOfMemory, kHost, {1, 2}, 2, kSpillOutOfMemory},
      {"cuDevicePrimaryCtxRetain", kInvalidDevice, kHost, {1, 2}, 2, kSpillOutOfMemory},
      {"cuDeviceTotalMem_v2", kInvalidDevice, kHost, {1, 2}, 3, kInjectedOnly},
      {"cuDeviceTotalMem_v2", kInvalidDevice, kHost, {3}, 3, kDeviceQueryError},
      {"cuIpcGetMemHandle", kInvalidValue, kHost, {1}, 1, kInjectedOnly},
      {"cuLaunchHostFunc", kOutOfMemory, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuLaunchHostFunc", kIllegalAddress, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuMemAdvise_v2", kInvalidValue, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMemAdvise_v2", kNotSupported, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMemAlloc", kInvalidValue, kHost, {1}, 1, kInjectedOnly},
      {"cuMemAllocAsync", kOutOfMemory, kHost, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemAllocAsync_ptsz", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync_ptsz", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuMemAllocManaged", kOutOfMemory, kHost, {1, 2}, 2, kSpillOutOfMemory},
      {"cuMemAllocManaged", kNotSupported, kHost, {1, 2}, 2, kSpillOutOfMemory},
      {"cuMemAllocPitch", kInvalidValue, kHost, {1}, 1, kInjectedOnly},
      {"cuMemAllocPitch_v2", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuMemAlloc_v2", kOutOfMemory, kHost, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemCreate", kOutOfMemory, kHost, {1}, 2, kInjectedOnly},
      // The shim's own cuMemCreate of a host-located handle, in host mode too (Note [Host-located
      // VMM spills]).
      {"cuMemCreate", kOutOfMemory, kHost, {2}, 2, kSpillOutOfMemory},
      {"cuMemCreate", kInvalidValue, kHost, {1}, 2, kInjectedOnly},
      {"cuMemCreate", kInvalidValue, kHost, {2}, 2, kSpillOutOfMemory},
      {"cuMemFree", kInvalidValue, kHost, {1}, 1, kInjectedOnly},
      {"cuMemFreeAsync", kInvalidValue, kHost, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemFreeAsync", kIllegalAddress, kHost, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemFreeAsync_ptsz", kIllegalAddress, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMemFreeHost", kInvalidValue, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMemFree_v2", kInvalidValue, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuMemFree_v2", kIllegalAddress, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuMemGetInfo_v2", kInvalidContext, kHost, {1, 2, 3, 4, 5}, 5, kInjectedOnly},
      {"cuMemHostAlloc", kOutOfMemory, kHost, {1, 2, 3, 4, 5, 6, 7}, 7, kSpillOutOfMemory},
      {"cuMemHostGetDevicePointer_v2",
       kInvalidValue,
       kHost,
       {1, 2, 3, 4, 5, 6},
       6,
       kSpillOutOfMemory},
      {"cuMemHostGetDevicePointer_v2",
       kNotSupported,
       kHost,
       {1, 2, 3, 4, 5, 6},
       6,
       kSpillOutOfMemory},
      {"cuMemMap", kInvalidValue, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMemPoolGetAttribute",
       kInvalidValue,
       kHost,
       {1, 5, 9, 13, 17, 19, 21, 23, 25, 29, 33, 37, 47, 54, 55, 57, 59, 61, 63, 65, 67, 71},
       79,
       kInjectedOnly},
      {"cuMemPoolTrimTo", kInvalidValue, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMemRelease", kInvalidValue, kHost, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemRetainAllocationHandle", kInvalidValue, kHost, {1}, 1, kInjectedOnly},
      {"cuMemUnmap", kInvalidValue, kHost, {1, 2}, 2, kInjectedOnly},
      {"cuMipmappedArrayCreate", kOutOfMemory, kHost, {1}, 1, kInjectedOnly},
      {"cuMipmappedArrayDestroy", kInvalidHandle, kHost, {1}, 1, kInjectedOnly},
      {"cuStreamGetDevice", kInvalidHandle, kHost, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuStreamIsCapturing",
       kInvalidHandle,
       kHost,
       {1, 2, 3, 4, 6, 7, 8, 9, 10, 11},
       11,
       kStreamOrderedError},
      {"cuStreamIsCapturing", kInvalidHandle, kHost, {5}, 11, kStreamOrderedError},
      {"cuStreamIsCapturing",
       kIllegalAddress,
       kHost,
       {1, 2, 3, 4, 6, 7, 8, 9, 10, 11},
       11,
       kStreamOrderedError},
      {"cuStreamIsCapturing", kIllegalAddress, kHost, {5}, 11, kStreamOrderedError},
      {"cuStreamSynchronize", kIllegalAddress, kHost, {1, 11}, 38, kInjectedOnly},
      {"cuStreamSynchronize", kLaunchFailed, kHost, {1, 11}, 38, kInjectedOnly},
      {"cuArray3DCreate_v2", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuArrayCreate_v2", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuArrayDestroy", kInvalidHandle, kOff, {1, 2}, 2, kInjectedOnly},
      {"cuCtxGetCurrent", kInvalidContext, kOff, {1}, 1, kInjectedOnly},
      {"cuCtxGetDevice",
       kInvalidContext,
       kOff,
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
       21,
       kDeviceQueryError},
      {"cuCtxPopCurrent_v2", kInvalidContext, kOff, {1}, 1, kInjectedOnly},
      {"cuCtxSynchronize", kIllegalAddress, kOff, {1}, 1, kInjectedOnly},
      {"cuCtxSynchronize", kLaunchFailed, kOff, {1}, 1, kInjectedOnly},
      {"cuDeviceGet", kInvalidDevice, kOff, {1, 2, 3}, 3, kInjectedOnly},
      {"cuDeviceGetCount", kInvalidValue, kOff, {1, 2}, 2, kInjectedOnly},
      {"cuDeviceGetDefaultMemPool", kInvalidDevice, kOff, {1}, 1, kInjectedOnly},
      {"cuDeviceGetMemPool", kInvalidValue, kOff, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuDeviceGetMemPool", kNotSupported, kOff, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuDevicePrimaryCtxRelease_v2", kInvalidContext, kOff, {1}, 1, kInjectedOnly},
      {"cuDevicePrimaryCtxRetain", kOutOfMemory, kOff, {1}, 1, kSpillOutOfMemory},
      {"cuDevicePrimaryCtxRetain", kInvalidDevice, kOff, {1}, 1, kSpillOutOfMemory},
      {"cuDeviceTotalMem_v2", kInvalidDevice, kOff, {1, 2}, 3, kInjectedOnly},
      {"cuDeviceTotalMem_v2", kInvalidDevice, kOff, {3}, 3, kDeviceQueryError},
      {"cuIpcGetMemHandle", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuLaunchHostFunc", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuLaunchHostFunc", kIllegalAddress, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAlloc", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAllocAsync", kOutOfMemory, kOff, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemAllocAsync_ptsz", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAllocFromPoolAsync_ptsz", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAllocManaged", kOutOfMemory, kOff, {1}, 1, kSpillOutOfMemory},
      {"cuMemAllocManaged", kNotSupported, kOff, {1}, 1, kSpillOutOfMemory},
      {"cuMemAllocPitch", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAllocPitch_v2", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuMemAlloc_v2", kOutOfMemory, kOff, {1, 2, 3}, 3, kInjectedOnly},
      {"cuMemCreate", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuMemFree", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuMemFreeAsync", kInvalidValue, kOff, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemFreeAsync", kIllegalAddress, kOff, {1, 2, 3, 4}, 4, kInjectedOnly},
      {"cuMemFreeAsync_ptsz", kIllegalAddress, kOff, {1, 2}, 2, kInjectedOnly},
      {"cuMemFreeHost", kInvalidValue, kOff, {1, 2}, 2, kInjectedOnly},
      {"cuMemFree_v2", kInvalidValue, kOff, {1, 2, 3, 4, 5}, 5, kInjectedOnly},
      {"cuMemFree_v2", kIllegalAddress, kOff, {1, 2, 3, 4, 5}, 5, kInjectedOnly},
      {"cuMemGetInfo_v2", kInvalidContext, kOff, {1, 2, 3, 4, 5}, 5, kInjectedOnly},
      {"cuMemHostAlloc", kOutOfMemory, kOff, {1}, 1, kSpillOutOfMemory},
      {"cuMemMap", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuMemPoolGetAttribute",
       kInvalidValue,
       kOff,
       {1, 5, 9, 13, 17, 19, 21, 23, 25, 29, 33, 37, 47, 54, 55, 57, 59, 61, 63, 65, 67, 71},
       79,
       kInjectedOnly},
      {"cuMemPoolTrimTo", kInvalidValue, kOff, {1, 2}, 2, kInjectedOnly},
      {"cuMemRelease", kInvalidValue, kOff, {1, 2}, 2, kInjectedOnly},
      {"cuMemRetainAllocationHandle", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuMemUnmap", kInvalidValue, kOff, {1}, 1, kInjectedOnly},
      {"cuMipmappedArrayCreate", kOutOfMemory, kOff, {1}, 1, kInjectedOnly},
      {"cuMipmappedArrayDestroy", kInvalidHandle, kOff, {1}, 1, kInjectedOnly},
      {"cuStreamGetDevice", kInvalidHandle, kOff, {1, 2, 3, 4, 5, 6}, 6, kInjectedOnly},
      {"cuStreamIsCapturing", kInvalidHandle, kOff, {1}, 1, kStreamOrderedError},
      {"cuStreamIsCapturing", kIllegalAddress, kOff, {1}, 1, kStreamOrderedError},
      {"cuStreamSynchronize", kIllegalAddress, kOff, {1, 11}, 22, kInjectedOnly},
      {"cuStreamSynchronize", kLaunchFailed, kOff, {1, 11}, 22, kInjectedOnly},
  };
  return table;
}

}  // namespace faults
