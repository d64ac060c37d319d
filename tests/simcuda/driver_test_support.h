// Shared helpers for simcuda's driver-API tests.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#define ASSERT_CU(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call
#define EXPECT_CU(call) EXPECT_EQ((call), CUDA_SUCCESS) << #call

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

// Each test starts with the primary context of device 0 current.
class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDeviceGet(&device_, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, device_));
    ASSERT_CU(cuCtxSetCurrent(context_));
  }
  void TearDown() override { cuDevicePrimaryCtxRelease(device_); }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};
