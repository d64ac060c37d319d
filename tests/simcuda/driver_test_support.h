// Shared helpers for simcuda's driver-API tests.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

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

  // Device memory in use on the current context's device, as cuMemGetInfo reports it.
  static size_t used() {
    size_t free = 0, total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    return total - free;
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

// `count` elements of device memory at `source`, copied to the host.
template <typename T = unsigned char>
std::vector<T> download(CUdeviceptr source, size_t count) {
  std::vector<T> host(count);
  EXPECT_CU(cuMemcpyDtoH(host.data(), source, count * sizeof(T)));
  return host;
}

template <typename T>
void upload(CUdeviceptr destination, const std::vector<T>& host) {
  EXPECT_CU(cuMemcpyHtoD(destination, host.data(), host.size() * sizeof(T)));
}

// For the child of a death test that needs its own cuInit, since simcuda reads SIMCUDA_ATTRS once
// per process: sets SIMCUDA_ATTRS=`attributes`, initialises and makes the primary context of
// device 0 current, or exits with `failure_code` when any of that fails. Returns the device.
inline CUdevice init_child_with_attributes(const char* attributes, int failure_code) {
  setenv("SIMCUDA_ATTRS", attributes, 1);
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS)
    std::exit(failure_code);
  return device;
}
