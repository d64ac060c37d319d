// A driver-API program that job_safety_test.cpp runs under the shim on simcuda, to check that
// the shim never harms the job it is preloaded into:
//
//   job_safety_program init
//       cuInit(0) and its result ("cuInit(0) = 1"): an invalid configuration must fail it.
//   job_safety_program spill
//       cuInit(0), then blocks over the budget, which spill (each spill is logged).
//   job_safety_program closed-stderr-file PATH
//       Started with standard error closed. The shim is initialised first (a dlsym lookup of a
//       driver function, as the CUDA runtime does), then the program opens PATH, which gets
//       descriptor 2, and makes the shim log: spills over a small budget, and the exit summary.
//       The test then checks that PATH is still empty.
//   job_safety_program closed-stderr-device
//       Started with standard error closed. cuInit initialises the shim and then simcuda, whose
//       device memory is a file that takes descriptor 2. The program fills every block it
//       allocates with a pattern, makes the shim log (spills), and checks every byte.
//   job_safety_program full-stderr-pipe
//       Makes its standard error a pipe that it fills and never reads (as a parent that reads its
//       child's output only once the child has ended), then makes the shim log (spills, and the
//       exit summary): the job must still end.
//
// Exits 0 when every check passes; a failed check prints it on standard output (standard error
// is closed) and exits 1.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kBlock = size_t{4} << 20;
// Over the tests' 8 MiB budget: blocks 3 to 6 spill, and each spill is logged.
constexpr int kBlocks = 6;

#define CHECK(condition)                                                        \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

#define CHECK_CU(call)                                                  \
  do {                                                                  \
    const CUresult check_result_ = (call);                              \
    if (check_result_ != CUDA_SUCCESS) {                                \
      std::printf("%s:%d: %s returned %d\n", __FILE__, __LINE__, #call, \
                  static_cast<int>(check_result_));                     \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

std::string target_of(int fd) {
  char buffer[256] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t length = readlink(link.c_str(), buffer, sizeof buffer - 1);
  return length > 0 ? std::string(buffer, static_cast<size_t>(length)) : "";
}

uint32_t pattern(int block, size_t word) {
  return static_cast<uint32_t>(block) * 0x9e3779b9u ^ static_cast<uint32_t>(word * 2654435761u);
}

// Device 0's primary context; blocks that fill the budget and spill (each spill is logged), all
// filled with a pattern and read back.
void allocate_spill_and_verify() {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  std::vector<CUdeviceptr> blocks(kBlocks);
  std::vector<uint32_t> host(kBlock / sizeof(uint32_t));
  for (int i = 0; i < kBlocks; ++i) {
    CHECK_CU(cuMemAlloc(&blocks[i], kBlock));
    for (size_t j = 0; j < host.size(); ++j) host[j] = pattern(i, j);
    CHECK_CU(cuMemcpyHtoD(blocks[i], host.data(), kBlock));
  }
  for (int i = 0; i < kBlocks; ++i) {
    CHECK_CU(cuMemcpyDtoH(host.data(), blocks[i], kBlock));
    for (size_t j = 0; j < host.size(); ++j) {
      if (host[j] != pattern(i, j)) {
        std::printf("block %d differs at byte %zu\n", i, j * sizeof(uint32_t));
        std::exit(1);
      }
    }
  }
  for (const CUdeviceptr block : blocks) CHECK_CU(cuMemFree(block));
}

int init_only() {
  const CUresult result = cuInit(0);
  std::printf("cuInit(0) = %d\n", static_cast<int>(result));
  return 0;
}

int closed_stderr_file(const char* path) {
  CHECK(!is_open(STDERR_FILENO));
  // The shim starts with the first driver lookup: the CUDA runtime's, before cuInit.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(driver != nullptr);
  CHECK(dlsym(driver, "cuInit") != nullptr);
  const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK(fd == STDERR_FILENO);
  CHECK_CU(cuInit(0));
  allocate_spill_and_verify();
  std::printf("descriptor 2 is %s\n", path);
  return 0;  // the exit summary is logged after this
}

// Descriptor 2 closed, and a file the program opens close-on-exec (as Python opens every file)
// takes it before the shim starts: the shim must not take it for standard error.
int stderr_taken_before_the_shim(const char* path) {
  CHECK(!is_open(STDERR_FILENO));
  const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CHECK(fd == STDERR_FILENO);
  CHECK_CU(cuInit(0));
  allocate_spill_and_verify();
  std::printf("descriptor 2 is %s\n", path);
  return 0;  // the exit summary is logged after this
}

int closed_stderr_device() {
  CHECK(!is_open(STDERR_FILENO));
  CHECK_CU(cuInit(0));
  // The premise: simcuda's device memory took the descriptor the shim may not write to.
  std::printf("descriptor 2 is %s\n", target_of(STDERR_FILENO).c_str());
  CHECK(target_of(STDERR_FILENO).find("simcuda") != std::string::npos);
  allocate_spill_and_verify();
  return 0;
}

// Note [A full pipe never holds the job] in shim/telemetry/owned_descriptor.h.
int full_stderr_pipe() {
  int ends[2];
  CHECK(pipe(ends) == 0);
  CHECK(dup2(ends[1], STDERR_FILENO) == STDERR_FILENO);
  close(ends[1]);  // ends[0] stays open, never read
  CHECK(fcntl(STDERR_FILENO, F_SETFL, O_NONBLOCK) == 0);
  static const char filler[4096] = {};
  while (write(STDERR_FILENO, filler, sizeof filler) > 0) {
  }
  CHECK(errno == EAGAIN);
  CHECK(fcntl(STDERR_FILENO, F_SETFL, 0) == 0);  // blocking again, as a standard error is
  CHECK_CU(cuInit(0));
  allocate_spill_and_verify();
  std::printf("spilled with standard error full\n");
  return 0;  // the exit summary is logged after this
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "init") return init_only();
  if (mode == "spill") {
    CHECK_CU(cuInit(0));
    allocate_spill_and_verify();
    return 0;
  }
  if (mode == "closed-stderr-file" && argc == 3) return closed_stderr_file(argv[2]);
  if (mode == "stderr-taken-before-the-shim" && argc == 3)
    return stderr_taken_before_the_shim(argv[2]);
  if (mode == "closed-stderr-device") return closed_stderr_device();
  if (mode == "full-stderr-pipe") return full_stderr_pipe();
  std::printf(
      "usage: %s init | spill | closed-stderr-file PATH | stderr-taken-before-the-shim PATH | "
      "closed-stderr-device | full-stderr-pipe\n",
      argv[0]);
  return 2;
}
