/*
 * An ordinary CUDA driver-API program that needs more device memory than the GPU has: it asks
 * for a working set of 1.5 times the device's memory in 64 MiB blocks, fills each block with its
 * own pattern and reads every block back. On its own it stops with CUDA_ERROR_OUT_OF_MEMORY,
 * which is the failure vramspill exists to remove. It is plain C against the toolkit's cuda.h and
 * links the toolkit's stub libcuda.so, so the same binary runs on a GPU and on simcuda.
 *
 * Exit status: 0 when the whole working set was allocated and verified, 2 when an allocation
 * failed with CUDA_ERROR_OUT_OF_MEMORY, 1 on any other error.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES ((size_t)64 << 20)
#define MAX_BLOCKS 8192

static const char* error_name(CUresult result) {
  const char* name = NULL;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS ? name : "unknown CUresult";
}

static int fail(const char* what, CUresult result) {
  fprintf(stderr, "oom_demo: %s failed: %s\n", what, error_name(result));
  return 1;
}

static int verify_block(CUdeviceptr block, uint32_t pattern, uint32_t* staging) {
  CUresult result = cuMemcpyDtoH(staging, block, BLOCK_BYTES);
  if (result != CUDA_SUCCESS) return fail("cuMemcpyDtoH", result);
  for (size_t i = 0; i < BLOCK_BYTES / sizeof(uint32_t); ++i) {
    if (staging[i] != pattern) {
      fprintf(stderr, "oom_demo: block with pattern %08x holds %08x at word %zu\n", pattern,
              staging[i], i);
      return 1;
    }
  }
  return 0;
}

int main(void) {
  CUdevice device;
  CUcontext context;
  CUresult result = cuInit(0);
  if (result != CUDA_SUCCESS) return fail("cuInit", result);
  if ((result = cuDeviceGet(&device, 0)) != CUDA_SUCCESS) return fail("cuDeviceGet", result);
  if ((result = cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS)
    return fail("cuDevicePrimaryCtxRetain", result);
  if ((result = cuCtxSetCurrent(context)) != CUDA_SUCCESS) return fail("cuCtxSetCurrent", result);

  char name[128];
  size_t free_bytes = 0, total_bytes = 0;
  cuDeviceGetName(name, sizeof name, device);
  if ((result = cuMemGetInfo(&free_bytes, &total_bytes)) != CUDA_SUCCESS)
    return fail("cuMemGetInfo", result);
  size_t wanted_blocks = (total_bytes + total_bytes / 2) / BLOCK_BYTES;
  if (wanted_blocks > MAX_BLOCKS) wanted_blocks = MAX_BLOCKS;
  printf("device 0: %s, %zu MiB total, %zu MiB free\n", name, total_bytes >> 20, free_bytes >> 20);
  printf("working set: %zu blocks of %zu MiB = %zu MiB (1.5x the device)\n", wanted_blocks,
         BLOCK_BYTES >> 20, wanted_blocks * (BLOCK_BYTES >> 20));

  static CUdeviceptr blocks[MAX_BLOCKS];
  size_t allocated = 0;
  int status = 0;
  for (; allocated < wanted_blocks; ++allocated) {
    result = cuMemAlloc(&blocks[allocated], BLOCK_BYTES);
    if (result != CUDA_SUCCESS) break;
    result = cuMemsetD32(blocks[allocated], 0x5eed0000u + (uint32_t)allocated,
                         BLOCK_BYTES / sizeof(uint32_t));
    if (result != CUDA_SUCCESS) {
      status = fail("cuMemsetD32", result);
      break;
    }
  }
  if (status == 0 && allocated < wanted_blocks) {
    printf("block %zu of %zu: cuMemAlloc(%zu MiB) -> %s after %zu MiB\n", allocated + 1,
           wanted_blocks, BLOCK_BYTES >> 20, error_name(result), allocated * (BLOCK_BYTES >> 20));
    status = result == CUDA_ERROR_OUT_OF_MEMORY ? 2 : fail("cuMemAlloc", result);
  }

  uint32_t* staging = malloc(BLOCK_BYTES);
  size_t verified = 0;
  for (size_t i = 0; staging != NULL && i < allocated && status != 1; ++i, ++verified)
    if (verify_block(blocks[i], 0x5eed0000u + (uint32_t)i, staging) != 0) status = 1;
  printf("verified %zu of %zu allocated blocks byte for byte\n", verified, allocated);
  free(staging);
  for (size_t i = 0; i < allocated; ++i) cuMemFree(blocks[i]);
  cuDevicePrimaryCtxRelease(device);

  if (status == 0) printf("result: the whole working set fit and every byte is intact\n");
  if (status == 2) printf("result: out of device memory; the job would have died here\n");
  return status;
}
