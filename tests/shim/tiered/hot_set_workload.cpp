// A workload whose hot set moves, for comparing placement modes on simcuda's cost model (run by
// compare_modes.py; issue item 9 of tiered mode). 24 blocks of 8 MiB (three times a 64 MiB
// budget) are allocated in order; then three phases each work on six of them for many steps:
// the six allocated last, then the first six, then six in the middle. A step fills each hot block
// and copies each into its neighbour with kernels, so every hot block is touched several times a
// step. Placed once (`host` mode), the blocks allocated past the budget are read over the link on
// every touch; tiered mode brings each phase's hot set to the device once.
//
// Prints "modeled_ms <t>": the modeled time of the three phases (cuEventElapsedTime on simcuda,
// from its cost model: modeled, not measured), after checking every hot block's bytes.
#include <cuda.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "workload_support.h"

namespace {

constexpr size_t kBlock = size_t{8} << 20;
constexpr size_t kWords = kBlock / sizeof(uint32_t);
constexpr size_t kBlocks = 24;
constexpr size_t kHot = 6;
constexpr int kSteps = 30;

constexpr const char* kProgram = "hot_set_workload";

#define CHECK(call) WORKLOAD_CHECK(call, 1)

}  // namespace

int main() {
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  workload_support::BlockKernels kernels;
  CUstream stream = nullptr;
  CHECK(workload_support::open_device(&context, &module));
  CHECK(kernels.load(module));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  std::vector<CUdeviceptr> blocks(kBlocks);
  std::vector<uint32_t> expected(kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    CHECK(cuMemAlloc(&blocks[i], kBlock));
    expected[i] = static_cast<uint32_t>(i);
    CHECK(kernels.fill_block(blocks[i], kBlock, expected[i], stream));
  }

  CUevent start = nullptr;
  CUevent end = nullptr;
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
  CHECK(cuEventRecord(start, stream));
  constexpr std::array<size_t, 3> kPhaseFirst = {kBlocks - kHot, 0, kBlocks / 2 - kHot / 2};
  for (size_t phase = 0; phase < kPhaseFirst.size(); ++phase) {
    const size_t first = kPhaseFirst[phase];
    for (int step = 0; step < kSteps; ++step) {
      for (size_t i = 0; i < kHot; ++i) {
        expected[first + i] = static_cast<uint32_t>((phase + 1) * 1000000 + step * 100 + i);
        CHECK(kernels.fill_block(blocks[first + i], kBlock, expected[first + i], stream));
      }
      for (size_t i = 0; i + 1 < kHot; ++i) {  // each takes its right neighbour's value
        CHECK(kernels.copy_block(blocks[first + i], blocks[first + i + 1], kBlock, stream));
        expected[first + i] = expected[first + i + 1];
      }
    }
  }
  CHECK(cuEventRecord(end, stream));
  CHECK(cuEventSynchronize(end));
  float milliseconds = 0;
  CHECK(cuEventElapsedTime(&milliseconds, start, end));

  std::vector<uint32_t> words(kWords);
  for (size_t i = 0; i < kBlocks; ++i) {
    CHECK(cuMemcpyDtoH(words.data(), blocks[i], kBlock));
    for (const uint32_t word : words) {
      if (word != expected[i]) {
        std::fprintf(stderr, "hot_set_workload: block %zu holds %u, expected %u\n", i, word,
                     expected[i]);
        return 3;
      }
    }
  }
  for (const CUdeviceptr block : blocks) CHECK(cuMemFree(block));
  std::printf("modeled_ms %.3f\n", static_cast<double>(milliseconds));
  return 0;
}
