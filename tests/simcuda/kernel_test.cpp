// Modules, libraries, functions and kernel launches on simcuda: results checked byte for byte.
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_support.h"

// The per-thread-default-stream export, as nvcc's --default-stream per-thread selects it.
extern "C" CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int,
                                                unsigned int, unsigned int, unsigned int,
                                                unsigned int, unsigned int, CUstream, void**,
                                                void**);

namespace {

using KernelTest = KernelFixture;

TEST_F(KernelTest, AnyImageLoadsAndFunctionsResolveByName) {
  CUfunction function = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&function, module_, "vs_no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  const char* name = nullptr;
  ASSERT_CU(cuFuncGetName(&name, axpy_));
  EXPECT_STREQ(name, "vs_axpy_f32");
  CUmodule owner = nullptr;
  ASSERT_CU(cuFuncGetModule(&owner, fill_));
  EXPECT_EQ(owner, module_);
  unsigned int count = 0;
  ASSERT_CU(cuModuleGetFunctionCount(&count, module_));
  EXPECT_EQ(count, 4u);

  CUmodule other = nullptr;
  EXPECT_EQ(cuModuleLoad(&other, "/nonexistent/vs_kernels.fatbin"), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuModuleLoadData(&other, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuModuleLoadFatBinary(&other, "any fat binary"));
  ASSERT_CU(cuModuleUnload(other));

  // JIT options are accepted; the logs a program asks for come back empty.
  char info_log[64] = "stale", error_log[64] = "stale";
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {info_log, reinterpret_cast<void*>(sizeof info_log), error_log,
                    reinterpret_cast<void*>(sizeof error_log)};
  ASSERT_CU(cuModuleLoadDataEx(&other, "image", 4, options, values));
  EXPECT_STREQ(info_log, "");
  EXPECT_STREQ(error_log, "");
  EXPECT_EQ(values[1], nullptr);
  ASSERT_CU(cuModuleGetFunction(&function, other, "vs_copy"));
  ASSERT_CU(cuModuleUnload(other));
  // The module's functions die with it.
  size_t offset = 0, size = 0;
  EXPECT_EQ(cuFuncGetParamInfo(function, 0, &offset, &size), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleUnload(other), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(KernelTest, ParameterInfoFollowsTheAbi) {
  struct Expected {
    CUfunction function;
    std::vector<std::pair<size_t, size_t>> params;  // offset, size
  };
  const Expected all[] = {{fill_, {{0, 8}, {8, 4}, {16, 8}}},
                          {copy_, {{0, 8}, {8, 8}, {16, 8}}},
                          {axpy_, {{0, 8}, {8, 8}, {16, 4}, {24, 8}}}};
  for (const Expected& expected : all) {
    for (size_t i = 0; i < expected.params.size(); ++i) {
      size_t offset = 0, size = 0;
      ASSERT_CU(cuFuncGetParamInfo(expected.function, i, &offset, &size));
      EXPECT_EQ(offset, expected.params[i].first) << "parameter " << i;
      EXPECT_EQ(size, expected.params[i].second) << "parameter " << i;
    }
    size_t offset = 0, size = 0;
    EXPECT_EQ(cuFuncGetParamInfo(expected.function, expected.params.size(), &offset, &size),
              CUDA_ERROR_INVALID_VALUE);
  }
}

TEST_F(KernelTest, FillWritesExactlyTheRequestedElements) {
  constexpr size_t kCount = (size_t{1} << 20) + 3, kSlack = 16;
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, (kCount + kSlack) * 4));
  ASSERT_CU(fill(buffer, 0xA5A5A5A5u, kCount + kSlack));
  ASSERT_CU(fill(buffer, 0x01234567u, kCount));
  const std::vector<uint32_t> host = download<uint32_t>(buffer, kCount + kSlack);
  for (size_t i = 0; i < host.size(); ++i)
    ASSERT_EQ(host[i], i < kCount ? 0x01234567u : 0xA5A5A5A5u) << "element " << i;
  ASSERT_CU(cuMemFree(buffer));
}

TEST_F(KernelTest, CopyMovesBytesExactlyAtAnyAlignment) {
  constexpr size_t kBytes = 10007;
  std::vector<unsigned char> pattern(kBytes + 8);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<unsigned char>(i * 131 + 7);
  CUdeviceptr src = 0, dst = 0;
  ASSERT_CU(cuMemAlloc(&src, pattern.size()));
  ASSERT_CU(cuMemAlloc(&dst, pattern.size()));
  upload(src, pattern);
  ASSERT_CU(fill(dst, 0, pattern.size() / 4));
  ASSERT_CU(copy(dst + 3, src + 1, kBytes));
  const std::vector<unsigned char> host = download<unsigned char>(dst, pattern.size());
  for (size_t i = 0; i < host.size(); ++i) {
    const unsigned char expected = i >= 3 && i < 3 + kBytes ? pattern[i - 2] : 0;
    ASSERT_EQ(host[i], expected) << "byte " << i;
  }
  ASSERT_CU(cuMemFree(src));
  ASSERT_CU(cuMemFree(dst));
}

TEST_F(KernelTest, AxpyThroughAPackedExtraBuffer) {
  constexpr size_t kCount = 4099;
  std::vector<float> x(kCount), y(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    x[i] = static_cast<float>(i) * 0.37f - 11.0f;
    y[i] = 1.0f / static_cast<float>(i + 1);
  }
  CUdeviceptr dx = 0, dy = 0;
  ASSERT_CU(cuMemAlloc(&dx, kCount * 4));
  ASSERT_CU(cuMemAlloc(&dy, kCount * 4));
  upload(dx, x);
  upload(dy, y);
  // Packed at the offsets the driver reports, as a generic launcher would.
  float a = 1.5f;
  uint64_t n = kCount;
  const void* args[] = {&dy, &dx, &a, &n};
  unsigned char buffer[32] = {};
  size_t buffer_size = 0;
  for (size_t i = 0; i < 4; ++i) {
    size_t offset = 0, size = 0;
    ASSERT_CU(cuFuncGetParamInfo(axpy_, i, &offset, &size));
    std::memcpy(buffer + offset, args[i], size);
    buffer_size = offset + size;
  }
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &buffer_size, CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuLaunchKernel(axpy_, 17, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  const std::vector<float> result = download<float>(dy, kCount);
  for (size_t i = 0; i < kCount; ++i) {
    const float product = a * x[i];  // rounded, then the add rounded: no FMA, as in the kernel
    const float expected = product + y[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(result[i]), std::bit_cast<uint32_t>(expected)) << i;
  }
  ASSERT_CU(cuMemFree(dx));
  ASSERT_CU(cuMemFree(dy));
}

TEST_F(KernelTest, LaunchKernelExRunsOnTheConfiguredStream) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, size_t{4096} * 4));
  CUlaunchAttribute priority{};
  priority.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  priority.value.priority = 0;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &priority;
  config.numAttrs = 1;
  uint32_t value = 77;
  uint64_t count = 4096;
  void* params[] = {&buffer, &value, &count};
  ASSERT_CU(cuLaunchKernelEx(&config, fill_, params, nullptr));
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_EQ(download<uint32_t>(buffer, 4096), std::vector<uint32_t>(4096, 77));
  EXPECT_EQ(cuLaunchKernelEx(nullptr, fill_, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemFree(buffer));
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(KernelTest, ArgumentsAreCopiedWhenTheLaunchIsMade) {
  constexpr uint64_t kBig = uint64_t{32} << 20;  // keeps the stream busy for a while
  CUdeviceptr busy = 0, buffer = 0;
  ASSERT_CU(cuMemAlloc(&busy, kBig * 4));
  ASSERT_CU(cuMemAlloc(&buffer, size_t{1024} * 4));
  ASSERT_CU(fill(busy, 1, kBig));
  uint32_t value = 5;
  uint64_t count = 1024;
  void* params[] = {&buffer, &value, &count};
  ASSERT_CU(cuLaunchKernel(fill_, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  value = 6;  // storage reused at once, as programs may
  count = 0;
  EXPECT_EQ(download<uint32_t>(buffer, 1024), std::vector<uint32_t>(1024, 5));
  ASSERT_CU(cuMemFree(busy));
  ASSERT_CU(cuMemFree(buffer));
}

TEST_F(KernelTest, LaunchArgumentsAreChecked) {
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, 4096));
  uint32_t value = 1;
  uint64_t count = 16;
  void* params[] = {&buffer, &value, &count};
  unsigned char packed[24] = {};
  size_t packed_size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  auto launch = [&](CUfunction f, unsigned int grid, unsigned int block, CUstream stream,
                    void** kernel_params, void** launch_extra) {
    return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, kernel_params, launch_extra);
  };
  EXPECT_EQ(launch(fill_, 1, 1, nullptr, params, extra), CUDA_ERROR_INVALID_VALUE);     // both
  EXPECT_EQ(launch(fill_, 1, 1, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);  // neither
  packed_size = 20;  // smaller than the parameters
  EXPECT_EQ(launch(fill_, 1, 1, nullptr, nullptr, extra), CUDA_ERROR_INVALID_VALUE);
  void* no_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(launch(fill_, 1, 1, nullptr, nullptr, no_size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(nullptr, 1, 1, nullptr, params, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(launch(fill_, 0, 1, nullptr, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(fill_, 1, 2048, nullptr, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(fill_, 1, 1, reinterpret_cast<CUstream>(0x1234), params, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuCtxSynchronize());  // nothing bad was queued
  ASSERT_CU(cuMemFree(buffer));
}

TEST_F(KernelTest, FunctionAttributesHaveSaneValues) {
  int value = 0;
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fill_));
  EXPECT_EQ(value, 1024);
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_BINARY_VERSION, fill_));
  EXPECT_EQ(value, 90);
  ASSERT_CU(cuFuncSetAttribute(fill_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000));
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fill_));
  EXPECT_EQ(value, 100000);
  EXPECT_EQ(cuFuncSetAttribute(fill_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 30),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(fill_, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
  CUfunctionLoadingState state{};
  ASSERT_CU(cuFuncIsLoaded(&state, fill_));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_LOADED);
}

TEST_F(KernelTest, KernelsReachPinnedAndManagedMemoryDirectly) {
  void* pinned = nullptr;
  ASSERT_CU(cuMemHostAlloc(&pinned, size_t{4096} * 4, CU_MEMHOSTALLOC_DEVICEMAP));
  ASSERT_CU(fill(reinterpret_cast<CUdeviceptr>(pinned), 0xC0FFEEu, 4096));
  ASSERT_CU(cuCtxSynchronize());
  const auto* words = static_cast<const uint32_t*>(pinned);
  EXPECT_EQ(std::vector<uint32_t>(words, words + 4096), std::vector<uint32_t>(4096, 0xC0FFEEu));
  ASSERT_CU(cuMemFreeHost(pinned));

  CUdeviceptr managed = 0;
  ASSERT_CU(cuMemAllocManaged(&managed, size_t{1024} * 4, CU_MEM_ATTACH_GLOBAL));
  auto* values = reinterpret_cast<float*>(managed);
  for (int i = 0; i < 1024; ++i) values[i] = static_cast<float>(i);
  ASSERT_CU(axpy(managed, managed, 1.0f, 1024));  // y = x + y = 2i
  ASSERT_CU(cuCtxSynchronize());
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(values[i], 2.0f * static_cast<float>(i)) << i;
  ASSERT_CU(cuMemFree(managed));
}

TEST_F(KernelTest, PerThreadLaunchUsesThePerThreadStream) {
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, size_t{64} * 4));
  uint32_t value = 3;
  uint64_t count = 64;
  void* params[] = {&buffer, &value, &count};
  ASSERT_CU(cuLaunchKernel_ptsz(fill_, 1, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(download<uint32_t>(buffer, 64), std::vector<uint32_t>(64, 3));
  ASSERT_CU(cuMemFree(buffer));
}

// A captured launch is recorded, not run, and runs at each launch of the graph with the
// arguments it was captured with.
TEST_F(KernelTest, CapturedLaunchesRunWhenTheGraphIsLaunched) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buffer = 0;
  ASSERT_CU(cuMemAlloc(&buffer, size_t{1024} * 4));
  ASSERT_CU(fill(buffer, 0, 1024));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(fill(buffer, 11, 1024, stream));
  ASSERT_CU(axpy(buffer, buffer, 1.0f, 0, stream));  // n = 0: touches nothing
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream, &graph));
  EXPECT_EQ(download<uint32_t>(buffer, 1024), std::vector<uint32_t>(1024, 0));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream));
  ASSERT_CU(cuStreamSynchronize(stream));
  EXPECT_EQ(download<uint32_t>(buffer, 1024), std::vector<uint32_t>(1024, 11));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(buffer));
  ASSERT_CU(cuStreamDestroy(stream));
}

}  // namespace
