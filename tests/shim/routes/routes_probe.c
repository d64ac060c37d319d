/*
 * A plain C driver-API program for the tests that look at what the shim prints
 * (tests/shim/routes/CMakeLists.txt checks its output with check_output.py):
 *
 *   routes_probe init     cuInit(0) and its result: an invalid configuration must fail it.
 *   routes_probe refuse   200 MiB by cuMemAlloc, then 100 MiB by cuMemAllocPitch and by
 *                         cuArrayCreate: under a 256 MiB budget both are refused, and the log
 *                         says by which route and who holds the memory. Exits holding the
 *                         200 MiB, so the exit summary's peak is 200 MiB.
 *   routes_probe async    150 MiB by cuMemAllocAsync, freed and synchronised: the exit
 *                         summary's peak is what the pool reserved, counted once.
 *
 * Each step prints "<call> = <CUresult name>"; the program exits 0 unless a step that must work
 * fails.
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static const char* name_of(CUresult result) {
  const char* name = NULL;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || name == NULL) return "?";
  return name;
}

static int report(const char* call, CUresult result) {
  printf("%s = %s\n", call, name_of(result));
  fflush(stdout);
  return result == CUDA_SUCCESS;
}

static int init_only(void) {
  const CUresult result = cuInit(0);
  printf("cuInit(0) = %d (%s)\n", (int)result, name_of(result));
  return 0;
}

static int set_up_context(void) {
  CUdevice device = 0;
  CUcontext context = NULL;
  return report("cuInit", cuInit(0)) && report("cuDeviceGet", cuDeviceGet(&device, 0)) &&
         report("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&context, device)) &&
         report("cuCtxSetCurrent", cuCtxSetCurrent(context));
}

static int stream_ordered(void) {
  if (!set_up_context()) return 1;
  CUstream stream = NULL;
  CUdeviceptr block = 0;
  if (!report("cuStreamCreate", cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) ||
      !report("cuMemAllocAsync(150 MiB)", cuMemAllocAsync(&block, 150 * MiB, stream)) ||
      !report("cuMemFreeAsync", cuMemFreeAsync(block, stream)) ||
      !report("cuStreamSynchronize", cuStreamSynchronize(stream)))
    return 1;
  return 0;
}

static int refuse(void) {
  if (!set_up_context()) return 1;

  CUdeviceptr held = 0;
  if (!report("cuMemAlloc(200 MiB)", cuMemAlloc(&held, 200 * MiB))) return 1;

  CUdeviceptr pitched = 0;
  size_t pitch = 0;
  report("cuMemAllocPitch(100 MiB)", cuMemAllocPitch(&pitched, &pitch, 100 * 1024, 1024, 4));

  CUDA_ARRAY_DESCRIPTOR descriptor;
  memset(&descriptor, 0, sizeof descriptor);
  descriptor.Width = 100 * 256;
  descriptor.Height = 1024;
  descriptor.Format = CU_AD_FORMAT_FLOAT;
  descriptor.NumChannels = 1;
  CUarray array = NULL;
  report("cuArrayCreate(100 MiB)", cuArrayCreate(&array, &descriptor));

  size_t free_bytes = 0;
  size_t total = 0;
  if (!report("cuMemGetInfo", cuMemGetInfo(&free_bytes, &total))) return 1;
  printf("free %zu of %zu\n", free_bytes, total);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "init") == 0) return init_only();
  if (argc == 2 && strcmp(argv[1], "refuse") == 0) return refuse();
  if (argc == 2 && strcmp(argv[1], "async") == 0) return stream_ordered();
  fprintf(stderr, "usage: %s init|refuse|async\n", argv[0]);
  return 2;
}
