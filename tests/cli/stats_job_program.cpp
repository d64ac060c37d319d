// A CUDA job for stats_job_test.cpp, run under the shim on simcuda: allocates a block of each
// size given (MiB), says "ready" on standard output, waits until standard input is closed, frees
// the blocks and exits 0 (1 when a driver call fails).
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_support.h"

int main(int argc, char** argv) {
  using vramspill::testing::kMiB;
  vramspill::testing::init_primary_context();
  std::vector<CUdeviceptr> blocks;
  for (int i = 1; i < argc; ++i) {
    CUdeviceptr block = 0;
    CHECK_CU(cuMemAlloc(&block, std::strtoull(argv[i], nullptr, 10) * kMiB));
    blocks.push_back(block);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char byte = 0;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  for (const CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
  return 0;
}
