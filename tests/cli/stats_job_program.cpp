// A CUDA job for the tests of real jobs (stats_job_test.cpp, ending_signal_job_test.cpp), run
// under the shim on simcuda: allocates a block of each size given (MiB), says "ready" on standard
// output, waits until standard input is closed, frees the blocks and exits 0 (1 when a driver call
// fails). With --handle-sigterm first, it sets its own SIGTERM handler before any driver call,
// and SIGTERM then ends the wait as closing standard input does (it says "handled").
#include <cuda.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "program_support.h"

namespace {

volatile sig_atomic_t terminated = 0;

// Any thread may run it (simcuda's threads take signals too): the wait looks at `terminated`
// between short polls of standard input, so it sees the signal wherever it landed.
void on_sigterm(int) { terminated = 1; }

}  // namespace

int main(int argc, char** argv) {
  using vramspill::testing::kMiB;
  int first_size = 1;
  if (argc > 1 && std::strcmp(argv[1], "--handle-sigterm") == 0) {
    struct sigaction handling {};
    handling.sa_handler = on_sigterm;
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
  // Until standard input is closed, or the handler ran.
  for (char byte = 0; terminated == 0;) {
    pollfd input{STDIN_FILENO, POLLIN, 0};
    if (poll(&input, 1, 20) > 0 && read(STDIN_FILENO, &byte, 1) <= 0) break;
  }
  if (terminated != 0) std::printf("handled\n");
  for (const CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
  return 0;
}
