// A CUDA job for the tests of real jobs (stats_job_test.cpp, ending_signal_job_test.cpp), run
// under the shim on simcuda: allocates a block of each size given (MiB), says "ready" on standard
// output, waits until standard input is closed, frees the blocks and exits 0 (1 when a driver call
// fails). With --handle-sigterm first, it sets its own SIGTERM handler before any driver call,
// and SIGTERM then ends the wait as closing standard input does (it says "handled"). With
// --chain-sigterm first, it sets that handler once the shim has started instead, and the handler
// calls the one it replaced, as handlers that chain do; the program then takes a while to shut
// down ("drained") before it exits. With --take-over-descriptors first, it closes every
// descriptor from 10 up once the shim has started (as a program that closes what it did not open
// does) and opens an eventfd of its own in each number.
#include <cuda.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "program_support.h"

namespace {

volatile sig_atomic_t terminated = 0;
struct sigaction replaced {};  // --chain-sigterm: the action before the program's own

// Any thread may run it (simcuda's threads take signals too): the wait looks at `terminated`
// between short polls of standard input, so it sees the signal wherever it landed.
void on_sigterm(int signal) {
  terminated = 1;
  if ((replaced.sa_flags & SA_SIGINFO) == 0 && replaced.sa_handler != SIG_DFL &&
      replaced.sa_handler != SIG_IGN)
    replaced.sa_handler(signal);
}

void handle_sigterm(struct sigaction* before) {
  struct sigaction handling {};
  handling.sa_handler = on_sigterm;
  sigemptyset(&handling.sa_mask);
  sigaction(SIGTERM, &handling, before);
}

void take_over_descriptors() {
  std::vector<int> numbers;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int number = std::stoi(entry.path().filename().string());
    if (number >= 10) numbers.push_back(number);
  }
  for (const int number : numbers) {
    const int own = eventfd(0, 0);
    if (own < 0) continue;
    if (own != number) {
      dup2(own, number);  // closes what was there
      close(own);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using vramspill::testing::kMiB;
  const std::string option = argc > 1 && argv[1][0] == '-' ? argv[1] : "";
  const bool chain = option == "--chain-sigterm";
  const int first_size = option.empty() ? 1 : 2;
  if (option == "--handle-sigterm") handle_sigterm(nullptr);
  vramspill::testing::init_primary_context();
  if (chain) handle_sigterm(&replaced);
  if (option == "--take-over-descriptors") take_over_descriptors();
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
  if (terminated != 0 && chain) {
    std::fflush(stdout);
    usleep(500 * 1000);  // a graceful shutdown, long enough for the shim's thread to have acted
    std::printf("drained\n");
  }
  for (const CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
  return 0;
}
