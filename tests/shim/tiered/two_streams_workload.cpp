// A workload with two streams, for comparing tiered mode's remap windows on simcuda's cost model
// (run by compare_modes.py; Note [The tracked window] in shim/placement/tracked_work.h). One
// stream works one 16 MiB block hard: many fills a step, all on the device. The other swaps its
// hot set every step between two halves of 8 blocks of 8 MiB, which do not fit in the 64 MiB
// budget together with the busy block, so each step promotes four blocks and evicts four. With
// the safe window every promotion waits for the busy stream's queued fills; with the tracked
// window only for the swapping stream's own work, and the two streams overlap.
//
// Prints "modeled_ms <t>": from the start to the later of the two streams' ends (cuEventElapsedTime
// on simcuda, from its cost model: modeled, not measured), after checking every block's bytes.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "workload_support.h"

namespace {

constexpr size_t kBlock = size_t{8} << 20;
constexpr size_t kBusyBlock = size_t{16} << 20;
constexpr size_t kSwapped = 8;
constexpr size_t kHot = kSwapped / 2;
constexpr int kSteps = 12;
constexpr int kBusyFillsPerStep = 400;

constexpr const char* kProgram = "two_streams_workload";

#define CHECK(call) WORKLOAD_CHECK(call, 1)

CUresult fill(CUfunction kernel, CUdeviceptr block, size_t bytes, uint32_t value, CUstream stream) {
  uint64_t count = bytes / sizeof(uint32_t);
  void* params[] = {&block, &value, &count};
  return cuLaunchKernel(kernel, 64, 1, 1, 256, 1, 1, 0, stream, params, nullptr);
}

// Whether every word of `block` is `expected`.
bool holds(CUdeviceptr block, size_t bytes, uint32_t expected) {
  std::vector<uint32_t> words(bytes / sizeof(uint32_t));
  if (!workload_support::check(kProgram, cuMemcpyDtoH(words.data(), block, bytes), "cuMemcpyDtoH"))
    return false;
  return std::ranges::all_of(words, [&](uint32_t word) { return word == expected; });
}

}  // namespace

int main() {
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction fill_kernel = nullptr;
  std::array<CUstream, 2> streams{};  // busy, swapping
  CHECK(workload_support::open_device(&context, &module));
  CHECK(cuModuleGetFunction(&fill_kernel, module, "vs_fill_u32"));
  for (CUstream& stream : streams) CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const CUstream busy_stream = streams[0];
  const CUstream swap_stream = streams[1];

  CUdeviceptr busy = 0;
  CHECK(cuMemAlloc(&busy, kBusyBlock));
  std::vector<CUdeviceptr> swapped(kSwapped);
  std::vector<uint32_t> expected(kSwapped);
  for (size_t i = 0; i < kSwapped; ++i) {
    CHECK(cuMemAlloc(&swapped[i], kBlock));
    expected[i] = static_cast<uint32_t>(i);
    CHECK(fill(fill_kernel, swapped[i], kBlock, expected[i], swap_stream));
  }
  CHECK(cuCtxSynchronize());

  std::array<CUevent, 3> events{};  // start, busy's end, swapping's end
  for (CUevent& event : events) CHECK(cuEventCreate(&event, CU_EVENT_DEFAULT));
  CHECK(cuEventRecord(events[0], busy_stream));
  uint32_t busy_value = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (int i = 0; i < kBusyFillsPerStep; ++i)
      CHECK(fill(fill_kernel, busy, kBusyBlock, ++busy_value, busy_stream));
    const size_t first = (step % 2) * kHot;  // this step's half
    for (size_t i = first; i < first + kHot; ++i) {
      expected[i] = static_cast<uint32_t>(1000 * (step + 1) + i);
      CHECK(fill(fill_kernel, swapped[i], kBlock, expected[i], swap_stream));
    }
  }
  CHECK(cuEventRecord(events[1], busy_stream));
  CHECK(cuEventRecord(events[2], swap_stream));
  CHECK(cuCtxSynchronize());
  std::array<float, 2> ends{};
  CHECK(cuEventElapsedTime(&ends[0], events[0], events[1]));
  CHECK(cuEventElapsedTime(&ends[1], events[0], events[2]));

  if (!holds(busy, kBusyBlock, busy_value)) {
    std::fprintf(stderr, "two_streams_workload: the busy block lost its last fill\n");
    return 3;
  }
  for (size_t i = 0; i < kSwapped; ++i) {
    if (!holds(swapped[i], kBlock, expected[i])) {
      std::fprintf(stderr, "two_streams_workload: block %zu lost its last fill\n", i);
      return 3;
    }
  }
  for (const CUdeviceptr block : swapped) CHECK(cuMemFree(block));
  CHECK(cuMemFree(busy));
  std::printf("modeled_ms %.3f\n", static_cast<double>(std::max(ends[0], ends[1])));
  return 0;
}
