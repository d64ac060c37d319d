/*
 * What a device reset (cuDevicePrimaryCtxReset, which cudaDeviceReset calls) takes with it: the
 * facts vramspill's handling of a reset rests on (Note [Resetting the device] in
 * shim/hooks/device_reset.h) and simcuda models (Note [Resetting a primary context] in
 * tools/simcuda/src/core/context.cpp), measured rather than assumed. A plain driver-API program
 * (no shim): tools/gpu-check.sh runs it on a GPU, a test on simcuda.
 *
 * It makes one of each kind of memory in device 0's primary context (cuMemAlloc, managed, pinned
 * host, registered host, a stream-ordered pool block, a mapped VMM handle, an array), a stream
 * and an event, resets the device, and prints a row for each: what a pointer query of the memory
 * answers after the reset (vramspill takes CUDA_ERROR_INVALID_VALUE as "freed"), and what freeing
 * it answers. Then whether the context stays retained and usable, and the same for memory
 * allocated before the release of the context's last reference, which cuda.h says resets it too.
 * The rows that use a handle the reset may have destroyed (an array, an event, a stream) come
 * last, since a driver may crash following one.
 *
 * Usage: reset_probe [--help]
 * Exit status: 0 when every row was measured; 1 when setting up failed (the line names the
 * call); 2 for bad arguments.
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "no_arguments.h"

#define BYTES ((size_t)4 << 20)
#define GRANULE ((size_t)2 << 20)

static const char* error_name(CUresult result) {
  const char* name = NULL;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS && name != NULL ? name : "(unknown)";
}

#define CHECK(expression)                                                           \
  do {                                                                              \
    const CUresult checked_ = (expression);                                         \
    if (checked_ != CUDA_SUCCESS) {                                                 \
      fprintf(stderr, "reset_probe: %s: %s\n", #expression, error_name(checked_)); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

/* One row: what `result` was, flushed at once (a later row may find the driver crashing). */
static void row(const char* what, CUresult result) {
  printf("  %-58s %s\n", what, error_name(result));
  fflush(stdout);
}

/* What a pointer query of `address` answers: the context it names, or the error. */
static CUresult context_of(CUdeviceptr address) {
  CUcontext context = NULL;
  return cuPointerGetAttribute(&context, CU_POINTER_ATTRIBUTE_CONTEXT, address);
}

static const char kUsage[] =
    "Usage: reset_probe [--help]\n"
    "Makes each kind of memory, a stream and an event in device 0's primary context, resets the\n"
    "device (cuDevicePrimaryCtxReset) and prints what the driver answers about each afterwards.\n"
    "Runs on a GPU, or on simcuda (LD_LIBRARY_PATH=build/simcuda).\n";

int main(int argc, char** argv) {
  const int usage_status = no_arguments(argc, argv, kUsage);
  if (usage_status >= 0) return usage_status;
  static char pageable[BYTES] __attribute__((aligned(4096)));
  CUdevice device = 0;
  CUcontext context = NULL;
  char name[128] = "";
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  cuDeviceGetName(name, sizeof name, device);

  CUstream stream = NULL;
  CUevent event = NULL;
  CUdeviceptr linear = 0, managed = 0, pool_block = 0, reserved = 0;
  void* pinned = NULL;
  CUmemGenericAllocationHandle handle = 0;
  CUarray array = NULL;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CHECK(cuMemAlloc(&linear, BYTES));
  CHECK(cuMemAllocManaged(&managed, BYTES, CU_MEM_ATTACH_GLOBAL));
  CHECK(cuMemHostAlloc(&pinned, BYTES, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CHECK(cuMemHostRegister(pageable, BYTES, CU_MEMHOSTREGISTER_PORTABLE));
  CHECK(cuMemAllocAsync(&pool_block, BYTES, stream));
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  CHECK(cuMemAddressReserve(&reserved, GRANULE, GRANULE, 0, 0));
  CHECK(cuMemCreate(&handle, GRANULE, &prop, 0));
  CHECK(cuMemMap(reserved, GRANULE, 0, handle, 0));
  CUmemAccessDesc access;
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(reserved, GRANULE, &access, 1));
  CUDA_ARRAY_DESCRIPTOR descriptor = {256, 256, CU_AD_FORMAT_FLOAT, 1};
  CHECK(cuArrayCreate(&array, &descriptor));
  CHECK(cuMemsetD32Async(linear, 1, BYTES / 4, stream));
  CHECK(cuEventRecord(event, stream));
  CHECK(cuStreamSynchronize(stream));
  size_t free_before = 0, free_after = 0, total = 0;
  CHECK(cuMemGetInfo(&free_before, &total));

  printf("reset_probe: %s: each kind of memory and handle, after cuDevicePrimaryCtxReset\n", name);
  row("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset(device));
  unsigned int flags = 0;
  int active = 0;
  const CUresult state = cuDevicePrimaryCtxGetState(device, &flags, &active);
  printf("  %-58s %s, %s\n", "cuDevicePrimaryCtxGetState", error_name(state),
         active ? "active (still retained)" : "inactive");
  row("cuCtxSetCurrent (the retained handle)", cuCtxSetCurrent(context));
  const CUresult info = cuMemGetInfo(&free_after, &total);
  printf("  %-58s %s, %.1f MiB more free than before\n", "cuMemGetInfo", error_name(info),
         ((double)free_after - (double)free_before) / (1 << 20));

  row("pointer query: cuMemAlloc memory", context_of(linear));
  row("pointer query: managed memory", context_of(managed));
  row("pointer query: pinned host memory", context_of((CUdeviceptr)pinned));
  row("pointer query: registered host memory", context_of((CUdeviceptr)pageable));
  row("pointer query: stream-ordered pool block", context_of(pool_block));
  row("pointer query: mapped VMM handle", context_of(reserved));
  row("cuMemFree: cuMemAlloc memory", cuMemFree(linear));
  row("cuMemFree: managed memory", cuMemFree(managed));
  row("cuMemFreeHost: pinned host memory", cuMemFreeHost(pinned));
  row("cuMemHostUnregister: registered host memory", cuMemHostUnregister(pageable));
  row("cuMemUnmap: VMM handle", cuMemUnmap(reserved, GRANULE));
  row("cuMemRelease: VMM handle", cuMemRelease(handle));
  row("cuMemAddressFree: its range", cuMemAddressFree(reserved, GRANULE));
  row("cuMemFree: stream-ordered pool block", cuMemFree(pool_block));
  CUdeviceptr again = 0;
  row("cuMemAlloc after the reset", cuMemAlloc(&again, BYTES));
  if (again != 0) cuMemFree(again);

  /* cuda.h: the context is reset once its last reference is released (this program holds the
   * only one): whether memory allocated before that release outlives it. */
  CUdeviceptr before_release = 0;
  CHECK(cuMemAlloc(&before_release, BYTES));
  printf("reset_probe: memory allocated before the last cuDevicePrimaryCtxRelease\n");
  row("cuDevicePrimaryCtxRelease (the last reference)", cuDevicePrimaryCtxRelease(device));
  const CUresult released_state = cuDevicePrimaryCtxGetState(device, &flags, &active);
  printf("  %-58s %s, %s\n", "cuDevicePrimaryCtxGetState", error_name(released_state),
         active ? "active" : "inactive");
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  row("cuCtxSetCurrent (retained again)", cuCtxSetCurrent(context));
  row("pointer query: cuMemAlloc memory from before the release", context_of(before_release));
  row("cuMemFree: that memory", cuMemFree(before_release));

  /* Last, since a driver may follow a handle the reset destroyed and crash: the rows above are
   * printed by then. */
  printf("reset_probe: handles made before the reset\n");
  row("cuArrayDestroy: an array", cuArrayDestroy(array));
  row("cuEventQuery: an event", cuEventQuery(event));
  row("cuStreamQuery: a stream", cuStreamQuery(stream));
  cuDevicePrimaryCtxRelease(device);
  printf("reset_probe: done\n");
  return 0;
}
