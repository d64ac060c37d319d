// A CUDA job for the tests of real jobs (stats_job_test.cpp, ending_signal_job_test.cpp), run
// under the shim on simcuda: allocates a block of each size given (MiB), says "ready" on standard
// output, waits until standard input is closed, frees the blocks and exits 0 (1 when a driver call
// fails). With --handle-sigterm first, it sets its own SIGTERM handler before any driver call,
// and SIGTERM then ends the wait as closing standard input does (it says "handled").
#include <cuda.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_support.h"

namespace {

volatile sig_atomic_t terminated = 0;

// Also closes standard input (close() may be called from a handler): a signal that lands after
// the wait's check of `terminated` but before its read() blocks would otherwise leave the read
// waiting for input that never comes; on the closed descriptor it fails at once.
void on_sigterm(int) {
  terminated = 1;
  close(STDIN_FILENO);
}

}  // namespace

int main(int argc, char** argv) {
  using vramspill::testing::kMiB;
  int first_size = 1;
  if (argc > 1 && std::strcmp(argv[1], "--handle-sigterm") == 0) {
    struct sigaction handling {};
    handling.sa_handler = on_sigterm;  // no SA_RESTART: the wait's read() returns EINTR
    sigemptyset(&handling.sa_mask);
    sigaction(SIGTERM, &handling, nullptr);
    first_size = 2;
  }
  vramspill::testing::init_primary_context();
  std::vector<CUdeviceptr> blocks;
  for (int i = first_size; i < argc; ++i) {
    CUdeviceptr block = 0;
    CHECK_CU(cuMemAlloc(&block, std::strtoull(argv[i], nullptr, 10) * kMiB));
    blocks.push_back(block);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char byte = 0;
  while (terminated == 0 && read(STDIN_FILENO, &byte, 1) > 0) {
  }
  if (terminated != 0) std::printf("handled\n");
  for (const CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
  return 0;
}
