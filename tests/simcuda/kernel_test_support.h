// A fixture with the vs_* kernels loaded, for simcuda's kernel tests.
//
// On simcuda any image loads; on a GPU the fixture loads the fatbin named by VS_KERNELS_FATBIN
// (build/simcuda/vs_kernels.fatbin), so the same tests can run on both.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "driver_test_support.h"

class KernelFixture : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (const char* image = std::getenv("VS_KERNELS_FATBIN"); image != nullptr) {
      ASSERT_CU(cuModuleLoad(&module_, image));
    } else {
      ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
    }
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));
    ASSERT_CU(cuModuleGetFunction(&copy_, module_, "vs_copy"));
    ASSERT_CU(cuModuleGetFunction(&axpy_, module_, "vs_axpy_f32"));
  }
  void TearDown() override {
    if (module_ != nullptr) cuModuleUnload(module_);
    DriverTest::TearDown();
  }

  // Each launch: one-dimensional, 256 threads a block, on `stream`.
  CUresult fill(CUdeviceptr dst, uint32_t value, uint64_t count, CUstream stream = nullptr) {
    void* params[] = {&dst, &value, &count};
    return cuLaunchKernel(fill_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  CUresult copy(CUdeviceptr dst, CUdeviceptr src, uint64_t bytes, CUstream stream = nullptr) {
    void* params[] = {&dst, &src, &bytes};
    return cuLaunchKernel(copy_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  CUresult axpy(CUdeviceptr y, CUdeviceptr x, float a, uint64_t n, CUstream stream = nullptr) {
    void* params[] = {&y, &x, &a, &n};
    return cuLaunchKernel(axpy_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }

  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr;
  CUfunction copy_ = nullptr;
  CUfunction axpy_ = nullptr;
};
