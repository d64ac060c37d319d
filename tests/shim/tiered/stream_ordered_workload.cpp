// A training-like job whose per-step buffers are stream-ordered (issue 26, item 2: PyTorch with
// backend:cudaMallocAsync on the H200 spilled its stream-ordered requests again every step).
// Cold blocks written once fill the budget with tiered cuMemAlloc blocks; then every step
// allocates four 16 MiB buffers (two with cuMemAllocAsync from the device's default pool, two
// with cuMemAllocFromPoolAsync from a pool the job created), works on them with two hot tiered
// blocks, checks every byte of them and frees them on the stream. Both pools keep their reserve
// between steps (RELEASE_THRESHOLD at its maximum), as PyTorch's cudaMallocAsync backend sets it.
//
// WORKLOAD_ALLOCATION=cuMemAlloc makes the same buffers with cuMemAlloc and cuMemFree instead,
// the job tiered mode is compared against (compare_modes.py). WORKLOAD_RELEASE_THRESHOLD=default
// leaves the pools' threshold at the driver's default of 0, so that they give idle chunks back
// whenever the job synchronises.
//
// Prints, per step, how many of its stream-ordered buffers were not served by their pool (a
// buffer the shim spilled is managed or host memory, or from no pool), then
// "spilled after the first step: N", "first_step_ms <t>" and "modeled_ms <t>": the modeled time
// of the steps after the first (cuEventElapsedTime on simcuda, from its cost model: modeled, not
// measured; the byte checks between steps are not in it).
#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "workload_support.h"

namespace {

constexpr size_t kBlock = size_t{16} << 20;
constexpr size_t kWords = kBlock / sizeof(uint32_t);
constexpr size_t kColdBlocks = 8;  // 128 MiB: the budget the tests give it
constexpr size_t kHotBlocks = 2;
constexpr size_t kBuffers = 4;  // per step; the first half from the default pool
constexpr int kSteps = 10;

constexpr const char* kProgram = "stream_ordered_workload";

#define CHECK(call) WORKLOAD_CHECK(call, 1)

// Whether `buffer` is memory of `pool` on the device, as a stream-ordered allocation the driver
// served is; a spilled one is managed or host memory, or belongs to no pool.
bool served_by_pool(CUdeviceptr buffer, CUmemoryPool pool) {
  CUmemorytype type = CU_MEMORYTYPE_HOST;
  unsigned int managed = 1;
  CUmemoryPool owner = nullptr;
  return cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, buffer) == CUDA_SUCCESS &&
         cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, buffer) == CUDA_SUCCESS &&
         cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, buffer) ==
             CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_DEVICE && managed == 0 && owner == pool;
}

}  // namespace

int main() {
  const char* allocation = std::getenv("WORKLOAD_ALLOCATION");
  const bool stream_ordered = allocation == nullptr || std::strcmp(allocation, "cuMemAlloc") != 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  workload_support::BlockKernels kernels;
  CUstream stream = nullptr;
  CHECK(workload_support::open_device(&context, &module));
  CHECK(kernels.load(module));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  std::array<CUmemoryPool, 2> pools{};  // the buffers' pools: default, then created
  const auto pool_of = [&](size_t buffer) { return pools[buffer < kBuffers / 2 ? 0 : 1]; };
  CHECK(cuDeviceGetDefaultMemPool(&pools[0], 0));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CHECK(cuMemPoolCreate(&pools[1], &props));
  const char* threshold = std::getenv("WORKLOAD_RELEASE_THRESHOLD");
  if (threshold == nullptr || std::strcmp(threshold, "default") != 0) {
    cuuint64_t keep_everything = UINT64_MAX;
    for (const CUmemoryPool pool : pools)
      CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_everything));
  }

  std::vector<CUdeviceptr> cold(kColdBlocks);
  for (size_t i = 0; i < kColdBlocks; ++i) {
    CHECK(cuMemAlloc(&cold[i], kBlock));
    CHECK(kernels.fill_block(cold[i], kBlock, static_cast<uint32_t>(100 + i), stream));
  }
  std::array<CUdeviceptr, kHotBlocks> hot{};
  for (CUdeviceptr& block : hot) CHECK(cuMemAlloc(&block, kBlock));

  CUevent start = nullptr;
  CUevent end = nullptr;
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
  std::vector<uint32_t> words(kWords);
  float first_step_ms = 0;
  float later_steps_ms = 0;
  int spilled_after_first = 0;
  for (int step = 0; step < kSteps; ++step) {
    CHECK(cuEventRecord(start, stream));
    std::array<CUdeviceptr, kBuffers> buffers{};
    for (size_t i = 0; i < kBuffers; ++i) {
      const CUmemoryPool pool = pool_of(i);
      if (!stream_ordered)
        CHECK(cuMemAlloc(&buffers[i], kBlock));
      else if (pool == pools[0])
        CHECK(cuMemAllocAsync(&buffers[i], kBlock, stream));
      else
        CHECK(cuMemAllocFromPoolAsync(&buffers[i], kBlock, pool, stream));
    }
    // Each buffer is filled, the hot blocks take two of them, and the others take the hot
    // blocks: every buffer and hot block is read and written on the device.
    const auto value = [&](size_t i) { return static_cast<uint32_t>(step * 1000 + i); };
    for (size_t i = 0; i < kBuffers; ++i)
      CHECK(kernels.fill_block(buffers[i], kBlock, value(i), stream));
    for (size_t i = 0; i < kHotBlocks; ++i) {
      CHECK(kernels.copy_block(hot[i], buffers[i], kBlock, stream));
      CHECK(kernels.copy_block(buffers[kHotBlocks + i], hot[i], kBlock, stream));
    }
    CHECK(cuEventRecord(end, stream));
    CHECK(cuEventSynchronize(end));
    float milliseconds = 0;
    CHECK(cuEventElapsedTime(&milliseconds, start, end));
    (step == 0 ? first_step_ms : later_steps_ms) += milliseconds;

    int spilled = 0;
    for (size_t i = 0; i < kBuffers; ++i) {
      if (!workload_support::block_holds(kProgram, buffers[i], kBlock, value(i % kHotBlocks), words,
                                         "buffer", i))
        return 3;
      if (stream_ordered && !served_by_pool(buffers[i], pool_of(i))) ++spilled;
    }
    for (size_t i = 0; i < kHotBlocks; ++i)
      if (!workload_support::block_holds(kProgram, hot[i], kBlock, value(i), words, "hot block", i))
        return 3;
    std::printf("step %d: %d of %zu stream-ordered buffers spilled\n", step + 1, spilled,
                stream_ordered ? kBuffers : size_t{0});
    if (step > 0) spilled_after_first += spilled;
    for (const CUdeviceptr buffer : buffers)
      CHECK(stream_ordered ? cuMemFreeAsync(buffer, stream) : cuMemFree(buffer));
  }
  CHECK(cuStreamSynchronize(stream));
  for (size_t i = 0; i < kColdBlocks; ++i)
    if (!workload_support::block_holds(kProgram, cold[i], kBlock, static_cast<uint32_t>(100 + i),
                                       words, "cold block", i))
      return 3;
  for (const CUdeviceptr block : cold) CHECK(cuMemFree(block));
  for (const CUdeviceptr block : hot) CHECK(cuMemFree(block));
  CHECK(cuMemPoolDestroy(pools[1]));
  std::printf("spilled after the first step: %d\n", spilled_after_first);
  std::printf("first_step_ms %.3f\n", static_cast<double>(first_step_ms));
  std::printf("modeled_ms %.3f\n", static_cast<double>(later_steps_ms));
  return 0;
}
