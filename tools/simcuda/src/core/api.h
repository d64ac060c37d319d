// Conventions shared by every exported entry point of simcuda.
//
// Every driver function simcuda implements is defined as
//
//   SIMCUDA_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
//     SIMCUDA_ENTER("cuMemAlloc_v2");
//     ...
//   }
//
// SIMCUDA_ENTER refuses the call before a successful cuInit (CUDA_ERROR_NOT_INITIALIZED, as the
// driver does), applies fault injection (SIMCUDA_FAIL) and returns a sticky context error
// (e.g. CUDA_ERROR_ILLEGAL_ADDRESS after a kernel touched unmapped memory). Functions the driver
// answers before cuInit (cuGetProcAddress, cuDriverGetVersion, cuGetErrorName, ...) use
// SIMCUDA_ENTER_ANYTIME, which applies fault injection only.
#pragma once

#include <cuda.h>

#define SIMCUDA_EXPORT extern "C" __attribute__((visibility("default")))

namespace simcuda {

// Returns CUDA_SUCCESS when the call may proceed, otherwise the result to return.
CUresult enter_api(const char* export_name) noexcept;
CUresult enter_api_anytime(const char* export_name) noexcept;

}  // namespace simcuda

#define SIMCUDA_ENTER(export_name)                                              \
  do {                                                                          \
    if (CUresult simcuda_entry_result_ = ::simcuda::enter_api(export_name);     \
        simcuda_entry_result_ != CUDA_SUCCESS)                                  \
      return simcuda_entry_result_;                                             \
  } while (0)

#define SIMCUDA_ENTER_ANYTIME(export_name)                                            \
  do {                                                                                \
    if (CUresult simcuda_entry_result_ = ::simcuda::enter_api_anytime(export_name);   \
        simcuda_entry_result_ != CUDA_SUCCESS)                                        \
      return simcuda_entry_result_;                                                   \
  } while (0)
