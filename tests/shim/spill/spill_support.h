// Shared fixture for the spill tests: driver-API programs that run under the shim on simcuda
// (tests/shim/spill/CMakeLists.txt sets the environment: SIMCUDA_VRAM, the budget, the spill
// mode, and SPILL_EXPECT, the tier an allocation over the budget must land in).
//
// Every test finds out where each allocation really lives from the driver's own pointer
// attributes, never from the shim: CU_POINTER_ATTRIBUTE_IS_MANAGED for managed spills,
// CU_POINTER_ATTRIBUTE_MEMORY_TYPE = HOST for blocks of the pinned host pool, DEVICE otherwise.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "routes_support.h"  // ASSERT_CU, EXPECT_CU, routes::shim_is_loaded

namespace spill {

constexpr size_t kMiB = size_t{1} << 20;
// The block size of most tests: a multiple of 2 MiB, so simcuda charges exactly this much.
constexpr size_t kBlock = 4 * kMiB;

enum class Tier { kDevice, kManaged, kHost, kUnknown };

inline const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kManaged:
      return "managed";
    case Tier::kHost:
      return "host";
    case Tier::kUnknown:
      break;
  }
  return "unknown";
}

// SPILL_EXPECT: the tier a spilled allocation must be in ("managed" or "host"), or "off" when
// nothing may spill.
inline std::string expected_setting() {
  const char* value = std::getenv("SPILL_EXPECT");
  return value != nullptr ? value : "";
}
inline bool spilling_off() { return expected_setting() == "off"; }
inline Tier expected_tier() {
  const std::string value = expected_setting();
  if (value == "managed") return Tier::kManaged;
  if (value == "host") return Tier::kHost;
  return Tier::kUnknown;
}

// Where `pointer` lives, by the driver's answer.
inline Tier tier_of(CUdeviceptr pointer) {
  int managed = -1;
  unsigned int memory_type = 0;
  if (cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, pointer) != CUDA_SUCCESS ||
      cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer) !=
          CUDA_SUCCESS)
    return Tier::kUnknown;
  if (managed == 1) return Tier::kManaged;
  if (memory_type == CU_MEMORYTYPE_HOST) return Tier::kHost;
  if (memory_type == CU_MEMORYTYPE_DEVICE) return Tier::kDevice;
  return Tier::kUnknown;
}

// A simcuda function itself, past the shim: looked up with the C library's dlsym (the shim
// replaces the exported one) in the already loaded libcuda.so.1. Memory taken this way is
// invisible to the shim, like memory another process holds.
template <typename Function>
Function behind_the_shim(const char* name) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr || driver == nullptr) return nullptr;
  using Dlsym = void* (*)(void*, const char*);
  auto* libc_dlsym = reinterpret_cast<Dlsym>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
  if (libc_dlsym == nullptr)
    libc_dlsym = reinterpret_cast<Dlsym>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
  if (libc_dlsym == nullptr) return nullptr;
  return reinterpret_cast<Function>(libc_dlsym(driver, name));
}

// Device 0's primary context, the vs_* kernels, a non-blocking stream; SPILL_HIDDEN_VRAM_MIB
// (if set) MiB of VRAM taken behind the shim's back, so that the driver runs out of memory
// while the budget still has room.
class SpillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(routes::shim_is_loaded()) << "libvramspill.so is not preloaded";
    ASSERT_NE(expected_setting(), "") << "SPILL_EXPECT (managed, host or off) is not set";
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDeviceGet(&device_, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, device_));
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));
    ASSERT_CU(cuModuleGetFunction(&copy_, module_, "vs_copy"));
    ASSERT_CU(cuModuleGetFunction(&axpy_, module_, "vs_axpy_f32"));
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuDeviceTotalMem(&vram_, device_));
    size_t total = 0;
    ASSERT_CU(cuMemGetInfo(&budget_free_at_start_, &total));
    budget_ = total;
    ASSERT_EQ(budget_free_at_start_, budget_) << "a test leaked device memory";
    if (const char* hidden = std::getenv("SPILL_HIDDEN_VRAM_MIB"); hidden != nullptr) {
      hidden_ = std::strtoull(hidden, nullptr, 10) * kMiB;
      const auto allocate = behind_the_shim<decltype(&cuMemAlloc_v2)>("cuMemAlloc_v2");
      ASSERT_NE(allocate, nullptr);
      ASSERT_CU(allocate(&hidden_pointer_, hidden_));
    }
  }

  void TearDown() override {
    if (hidden_pointer_ != 0) {
      const auto release = behind_the_shim<decltype(&cuMemFree_v2)>("cuMemFree_v2");
      ASSERT_NE(release, nullptr);
      EXPECT_CU(release(hidden_pointer_));
    }
    if (stream_ != nullptr) {
      EXPECT_CU(cuStreamDestroy(stream_));
    }
    if (module_ != nullptr) {
      EXPECT_CU(cuModuleUnload(module_));
    }
    if (context_ != nullptr) {
      EXPECT_CU(cuDevicePrimaryCtxRelease(device_));
    }
  }

  // cuMemGetInfo's free figure after checking its total: the budget (at most the device).
  size_t free_bytes() const {
    size_t free = 0;
    size_t total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    EXPECT_EQ(total, budget_);
    EXPECT_LE(free, total);
    return free;
  }
  // What cuMemGetInfo must report as free while the program holds `device_bytes` on the device
  // (free = min(room under the budget, what the driver has left)).
  size_t expected_free(size_t device_bytes) const {
    const size_t room = device_bytes >= budget_ ? 0 : budget_ - device_bytes;
    const size_t driver = device_bytes + hidden_ >= vram_ ? 0 : vram_ - hidden_ - device_bytes;
    return std::min(room, driver);
  }
  // How many `bytes` blocks stay on the device before the next one spills.
  size_t device_capacity(size_t bytes) const { return expected_free(0) / bytes; }

  // Allocates `bytes` blocks with cuMemAlloc until the next one would not fit on the device;
  // each of them is checked to be device memory.
  void fill_device(std::vector<CUdeviceptr>& held, size_t bytes = kBlock) {
    const size_t count = device_capacity(bytes);
    for (size_t i = 0; i < count; ++i) {
      CUdeviceptr pointer = 0;
      ASSERT_CU(cuMemAlloc(&pointer, bytes));
      held.push_back(pointer);
      ASSERT_EQ(tier_of(pointer), Tier::kDevice) << "block " << i;
    }
    ASSERT_EQ(free_bytes(), expected_free(count * bytes));
    ASSERT_LT(free_bytes(), bytes);
  }
  static void free_all(std::vector<CUdeviceptr>& held) {
    for (const CUdeviceptr pointer : held) EXPECT_CU(cuMemFree(pointer));
    held.clear();
  }

  // Kernels, one-dimensional, on `stream` (the fixture's own when null is not meant).
  CUresult fill(CUdeviceptr dst, uint32_t value, uint64_t count, CUstream stream) const {
    void* params[] = {&dst, &value, &count};
    return cuLaunchKernel(fill_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  CUresult copy(CUdeviceptr dst, CUdeviceptr src, uint64_t bytes, CUstream stream) const {
    void* params[] = {&dst, &src, &bytes};
    return cuLaunchKernel(copy_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  CUresult axpy(CUdeviceptr y, CUdeviceptr x, float a, uint64_t n, CUstream stream) const {
    void* params[] = {&y, &x, &a, &n};
    return cuLaunchKernel(axpy_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }

  // The first word of `pointer`'s `count` words that differs from `expected(j)`, or count.
  template <typename Expected>
  static size_t first_mismatch(CUdeviceptr pointer, size_t count, Expected expected,
                               std::vector<uint32_t>& scratch) {
    scratch.resize(count);
    EXPECT_CU(cuMemcpyDtoH(scratch.data(), pointer, count * sizeof(uint32_t)));
    for (size_t j = 0; j < count; ++j)
      if (scratch[j] != expected(j)) return j;
    return count;
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr;
  CUfunction copy_ = nullptr;
  CUfunction axpy_ = nullptr;
  CUstream stream_ = nullptr;
  size_t vram_ = 0;
  size_t budget_ = 0;
  size_t budget_free_at_start_ = 0;
  size_t hidden_ = 0;
  CUdeviceptr hidden_pointer_ = 0;
};

// A word pattern that depends on the block and the position, so a block holding another
// block's bytes, or its own bytes shifted, is caught.
// The program lets go of `device`'s primary context, its only reference, and takes it again into
// *context, current: cuda.h says the driver resets it in between, and it is inactive until the
// retain, whatever the shim holds of it (Note [The last release of a primary context] in
// shim/hooks/device_reset.h).
inline void release_and_retain_primary(CUdevice device, CUcontext* context) {
  ASSERT_CU(cuDevicePrimaryCtxRelease(device));
  unsigned int flags = 0;
  int active = 1;
  ASSERT_CU(cuDevicePrimaryCtxGetState(device, &flags, &active));
  EXPECT_EQ(active, 0) << "the shim's own references keep the context alive";
  ASSERT_CU(cuDevicePrimaryCtxRetain(context, device));
  ASSERT_CU(cuCtxSetCurrent(*context));
}

inline uint32_t pattern(uint32_t seed, size_t j) {
  uint64_t x = (uint64_t{seed} << 32) ^ j;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

inline uint32_t bits_of(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

}  // namespace spill
