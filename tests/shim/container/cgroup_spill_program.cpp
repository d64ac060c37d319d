// Allocates 4 MiB blocks past the shim's device budget, so that they spill, writing each, until the
// shim refuses one or SPILL_TOTAL_MIB are spilled; run by cgroup_limit_test.cpp inside a small
// memory cgroup. Before that it takes SPILL_OWN_MIB of its own memory, behind the shim's back:
// before the shim starts (SPILL_OWN_WHEN=before) or after (=after, and then it waits out the shim's
// once-a-second re-check of the memory available, Note [A percent host limit follows the container]
// in shim/hooks/shim_state.cpp). Exit status 0 when a spill was refused with OUT_OF_MEMORY, 1 when
// everything fitted, 2 on any other error.
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kBlock = 4 * kMiB;

size_t mib_from_environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoull(value, nullptr, 10) * kMiB : 0;
}

// Memory the program uses itself, every page written so that the cgroup is charged for it.
char* take_own_memory(size_t bytes) {
  char* memory = static_cast<char*>(std::malloc(bytes));
  if (memory != nullptr) std::memset(memory, 0x11, bytes);
  return memory;
}

bool check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return true;
  std::printf("%s failed: error %d\n", what, static_cast<int>(result));
  return false;
}

}  // namespace

int main() {
  const size_t own = mib_from_environment("SPILL_OWN_MIB");
  const size_t total = mib_from_environment("SPILL_TOTAL_MIB");
  const char* when_setting = std::getenv("SPILL_OWN_WHEN");
  const bool own_after = when_setting != nullptr && std::string(when_setting) == "after";

  char* own_memory = own_after ? nullptr : take_own_memory(own);
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (!check(cuInit(0), "cuInit") || !check(cuDeviceGet(&device, 0), "cuDeviceGet") ||
      !check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") ||
      !check(cuCtxSetCurrent(context), "cuCtxSetCurrent"))
    return 2;
  if (own_after) {
    own_memory = take_own_memory(own);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  if (own_memory == nullptr) {
    std::printf("cannot take %zu MiB of the program's own memory\n", own / kMiB);
    return 2;
  }

  std::vector<CUdeviceptr> blocks;
  CUresult result = CUDA_SUCCESS;
  while (blocks.size() * kBlock < total) {
    CUdeviceptr block = 0;
    result = cuMemAlloc(&block, kBlock);
    if (result != CUDA_SUCCESS) break;
    blocks.push_back(block);
    // Synchronised, so that the pages are charged to the cgroup before the next allocation.
    if (!check(cuMemsetD8(block, 0x5a, kBlock), "cuMemsetD8") ||
        !check(cuCtxSynchronize(), "cuCtxSynchronize"))
      return 2;
  }
  std::printf("allocated %zu MiB in %zu blocks, then: error %d\n", blocks.size() * kBlock / kMiB,
              blocks.size(), static_cast<int>(result));
  for (const CUdeviceptr block : blocks) {
    if (!check(cuMemFree(block), "cuMemFree")) return 2;
  }
  std::free(own_memory);
  if (result == CUDA_SUCCESS) return 1;
  return result == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 2;
}
