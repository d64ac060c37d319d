// The fixture of the tiered-mode programs (tiered_test.cpp, graph_test.cpp): a context, the
// simcuda kernels they launch, three streams, and the check that simcuda counted no remap under
// queued work (Note [Remap protocol] in tools/simcuda) while the test ran.
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "spill_support.h"  // behind_the_shim, ASSERT_CU, kMiB

namespace tiered_test {

using spill::behind_the_shim;
using spill::kMiB;

constexpr size_t kBlock = 4 * kMiB;
constexpr size_t kWords = kBlock / sizeof(uint32_t);
constexpr int kStreams = 3;

inline uint64_t remap_violations() {
  const auto violations = behind_the_shim<uint64_t (*)()>("simcuda_remap_violations");
  return violations != nullptr ? violations() : ~uint64_t{0};
}

class TieredTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(routes::shim_is_loaded()) << "libvramspill.so is not preloaded";
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDeviceGet(&device_, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, device_));
    ASSERT_CU(cuCtxSetCurrent(context_));
    ASSERT_CU(cuModuleLoadData(&module_, "simcuda accepts any image"));
    ASSERT_CU(cuModuleGetFunction(&fill_, module_, "vs_fill_u32"));
    ASSERT_CU(cuModuleGetFunction(&copy_, module_, "vs_copy"));
    for (CUstream& stream : streams_) ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    violations_at_start_ = remap_violations();
  }

  void TearDown() override {
    EXPECT_CU(cuCtxSynchronize());
    EXPECT_EQ(remap_violations(), violations_at_start_) << "simcuda saw a remap under queued work";
    for (CUstream stream : streams_) {
      if (stream != nullptr) {
        EXPECT_CU(cuStreamDestroy(stream));
      }
    }
    if (module_ != nullptr) {
      EXPECT_CU(cuModuleUnload(module_));
    }
    if (context_ != nullptr) {
      EXPECT_CU(cuDevicePrimaryCtxRelease(device_));
    }
  }

  // Ends the capture on `stream`, which must have made a graph, and launches that graph once on
  // the same stream, waiting for the whole context before it is destroyed.
  void replay_capture(CUstream stream) {
    CUgraph graph = nullptr;
    ASSERT_CU(cuStreamEndCapture(stream, &graph));
    ASSERT_NE(graph, nullptr);
    CUgraphExec exec = nullptr;
    ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
    ASSERT_CU(cuGraphLaunch(exec, stream));
    ASSERT_CU(cuCtxSynchronize());
    ASSERT_CU(cuGraphExecDestroy(exec));
    ASSERT_CU(cuGraphDestroy(graph));
  }

  CUresult fill(CUdeviceptr block, uint32_t value, CUstream stream) {
    uint64_t count = kWords;
    void* params[] = {&block, &value, &count};
    return cuLaunchKernel(fill_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  CUresult copy(CUdeviceptr destination, CUdeviceptr source, CUstream stream) {
    uint64_t bytes = kBlock;
    void* params[] = {&destination, &source, &bytes};
    return cuLaunchKernel(copy_, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
  }
  // The device's free memory as the driver itself counts it (asked past the shim, whose own
  // answer is the budget's).
  static size_t driver_free() {
    const auto driver_info = behind_the_shim<decltype(&cuMemGetInfo_v2)>("cuMemGetInfo_v2");
    size_t free = 0;
    size_t total = 0;
    EXPECT_NE(driver_info, nullptr);
    if (driver_info != nullptr) {
      EXPECT_CU(driver_info(&free, &total));
    }
    return free;
  }
  // The budget's free bytes once they are back to `expected`, which the shim's free thread gives
  // back when a stream is past a cuMemFreeAsync (within 30 s: a slow machine is not a failure),
  // or as they are then.
  static size_t free_once_given_back(size_t expected) {
    size_t free = 0;
    size_t total = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      EXPECT_CU(cuMemGetInfo(&free, &total));
      if (free == expected || std::chrono::steady_clock::now() >= deadline) return free;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // Fills `block` with `value` on stream 0 (a launch, which brings it in where the policy agrees),
  // checks every word and frees it.
  void fill_check_and_free(CUdeviceptr block, uint32_t value) {
    ASSERT_CU(fill(block, value, streams_[0]));
    ASSERT_CU(cuStreamSynchronize(streams_[0]));
    expect_block(block, value);
    ASSERT_CU(cuMemFree(block));
  }
  // Every word of `block` is `value`.
  void expect_block(CUdeviceptr block, uint32_t value) {
    std::vector<uint32_t> words(kWords);
    ASSERT_CU(cuMemcpyDtoH(words.data(), block, kBlock));
    size_t wrong = 0;
    for (uint32_t word : words) wrong += word != value ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "block " << std::hex << block << " should hold " << value
                         << ", its first word is " << words.front();
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr;
  CUfunction copy_ = nullptr;
  CUstream streams_[kStreams] = {};
  uint64_t violations_at_start_ = 0;
};

}  // namespace tiered_test
