// A small driver-API program with known traffic, run by stats_test.cpp with SIMCUDA_STATS set.
//
// Usage: simcuda_stats_program COPY_BYTES FILL_COUNT [exit-while-running]
//   - vs_copy of COPY_BYTES from pinned host memory to device memory, on the legacy stream
//     (COPY_BYTES read over the link, COPY_BYTES written to device memory);
//   - vs_fill_u32 of FILL_COUNT words into device memory, on a non-blocking created stream;
//   - the device buffer (COPY_BYTES) stays allocated at exit; everything else is freed.
// Exits 0 on success (the statistics are written at exit), 1 on a driver error. With
// exit-while-running it returns from main right after queueing the fill, while it still runs.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                              \
  do {                                                                           \
    if (CUresult result_ = (call); result_ != CUDA_SUCCESS) {                    \
      std::fprintf(stderr, "%s failed: %d\n", #call, static_cast<int>(result_)); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  const bool exit_while_running = argc == 4 && std::strcmp(argv[3], "exit-while-running") == 0;
  if (argc != 3 && !exit_while_running) {
    std::fprintf(stderr, "usage: %s COPY_BYTES FILL_COUNT [exit-while-running]\n", argv[0]);
    return 2;
  }
  uint64_t copy_bytes = std::strtoull(argv[1], nullptr, 10);
  uint64_t fill_count = std::strtoull(argv[2], nullptr, 10);

  CUdevice device = 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction copy = nullptr, fill = nullptr;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  CHECK(cuModuleLoadData(&module, "simcuda accepts any image"));
  CHECK(cuModuleGetFunction(&copy, module, "vs_copy"));
  CHECK(cuModuleGetFunction(&fill, module, "vs_fill_u32"));

  void* pinned = nullptr;
  CUdeviceptr kept = 0, scratch = 0;
  CHECK(cuMemHostAlloc(&pinned, copy_bytes, 0));
  std::memset(pinned, 0x5a, copy_bytes);
  CHECK(cuMemAlloc(&kept, copy_bytes));
  CHECK(cuMemAlloc(&scratch, fill_count * 4));

  auto source = reinterpret_cast<CUdeviceptr>(pinned);
  void* copy_params[] = {&kept, &source, &copy_bytes};
  CHECK(cuLaunchKernel(copy, 1, 1, 1, 256, 1, 1, 0, nullptr, copy_params, nullptr));

  CUstream stream = nullptr;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  uint32_t value = 7;
  void* fill_params[] = {&scratch, &value, &fill_count};
  CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, stream, fill_params, nullptr));
  if (exit_while_running) return 0;
  CHECK(cuCtxSynchronize());

  CHECK(cuStreamDestroy(stream));
  CHECK(cuMemFree(scratch));
  CHECK(cuMemFreeHost(pinned));
  CHECK(cuModuleUnload(module));
  return 0;
}
