// Small helpers for the life-cycle test programs, which print what they saw and exit non-zero
// when a check fails; lifecycle_test.cpp runs them with and without the shim preloaded.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

// Prints the failed condition and exits with 1.
#define CHECK(condition)                                                                 \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define CHECK_CU(call)                                                           \
  do {                                                                           \
    const CUresult check_result_ = (call);                                       \
    if (check_result_ != CUDA_SUCCESS) {                                         \
      std::fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, \
                   static_cast<int>(check_result_));                             \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

namespace vramspill::testing {

inline constexpr size_t kMiB = size_t{1} << 20;

// The file name of the object that defines `address`, or "" (null, or not in any object).
inline std::string object_of(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Whether a file whose name contains `name` is mapped into this process.
inline bool is_mapped(const char* name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

inline bool shim_is_loaded() {
  return dlopen("libvramspill.so", RTLD_NOW | RTLD_NOLOAD) != nullptr;
}

// cuInit, device 0's primary context made current on this thread; returns the context.
inline CUcontext init_primary_context() {
  CHECK_CU(cuInit(0));
  CUdevice device = 0;
  CUcontext context = nullptr;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  return context;
}

// The C library's own dlsym, which the shim does not replace, and the real driver's functions
// looked up with it in libcuda.so.1's own scope (where the preloaded shim is not).
using DlsymFunction = void* (*)(void*, const char*);
inline DlsymFunction libc_dlsym() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(libc != nullptr);
  auto* function = reinterpret_cast<DlsymFunction>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
  if (function == nullptr)
    function = reinterpret_cast<DlsymFunction>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
  CHECK(function != nullptr);
  CHECK(object_of(reinterpret_cast<void*>(function)) == "libc.so.6");
  return function;
}

template <typename Function>
Function real_driver_function(const char* name) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(driver != nullptr);
  auto* function = reinterpret_cast<Function>(libc_dlsym()(driver, name));
  CHECK(function != nullptr);
  CHECK(object_of(reinterpret_cast<void*>(function)) == "libcuda.so.1");
  return function;
}

}  // namespace vramspill::testing
