/*
 * Which driver calls, made on another thread, break a stream capture in global mode: the calls
 * vramspill makes on its own threads, or for a program's legal call, while the program may be
 * capturing (README.md, "Tiered mode"; Note [Counting captures] in shim/core/capture_origins.h).
 * The shim makes none of them while it counts a capture; which of them the driver really forbids
 * decides what simcuda must refuse, and what the shim must keep off while one is in progress.
 * A plain driver-API program (no shim): tools/gpu-check.sh runs it on a GPU, a test on simcuda.
 *
 * The VMM calls are the remap mover's, which it makes beside captures on the assumption that a
 * capture allows them.
 *
 * For each call: thread A begins a capture of stream S in CU_STREAM_CAPTURE_MODE_GLOBAL and
 * captures a memset into it; thread B, in the default (global) mode, makes the call; thread A
 * captures another memset and ends the capture. A row says what the call returned and whether
 * the capture still ended with a graph. Every call is made on resources prepared before the
 * capture (another stream, an event recorded there, memory to free) and undone after it.
 *
 * Usage: capture_probe [--help]
 * Exit status: 0 when every row was measured; 1 when setting up or tearing down a row failed
 * (the line names the call); 2 for bad arguments.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "no_arguments.h"

#define BYTES ((size_t)4 << 20)
#define GRANULE ((size_t)2 << 20)

typedef struct {
  CUcontext context;
  CUstream other;          /* a stream no capture involves */
  CUevent recorded;        /* recorded on `other` before the capture */
  CUdeviceptr device;      /* device memory, for cuMemFree */
  CUdeviceptr managed;     /* managed memory, for prefetch, advice and cuMemFree */
  void* pinned;            /* page-locked memory, for cuMemFreeHost */
  void* pageable;          /* ordinary host memory, for cuMemHostRegister */
  CUdeviceptr reserved;    /* a reserved range of one granule, for the VMM calls */
  CUmemGenericAllocationHandle handle;  /* a granule's handle, unmapped; 0 once released */
  int mapped;              /* `handle` is mapped at `reserved` */
  CUresult result;         /* what the probed call returned */
  CUdeviceptr made;        /* what an allocating call made, freed after the capture */
  void* made_host;
} Row;

typedef CUresult (*Probe)(Row* row);

static CUresult probe_host_alloc(Row* row) {
  return cuMemHostAlloc(&row->made_host, BYTES,
                        CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
}
static CUresult probe_free_host(Row* row) {
  const CUresult result = cuMemFreeHost(row->pinned);
  if (result == CUDA_SUCCESS) row->pinned = NULL;
  return result;
}
static CUresult probe_host_register(Row* row) {
  const CUresult result = cuMemHostRegister(row->pageable, BYTES, CU_MEMHOSTREGISTER_PORTABLE);
  if (result == CUDA_SUCCESS) row->made_host = row->pageable;
  return result;
}
static CUresult probe_alloc(Row* row) { return cuMemAlloc(&row->made, BYTES); }
static CUresult probe_alloc_managed(Row* row) {
  return cuMemAllocManaged(&row->made, BYTES, CU_MEM_ATTACH_GLOBAL);
}
static CUresult probe_free(Row* row) {
  const CUresult result = cuMemFree(row->device);
  if (result == CUDA_SUCCESS) row->device = 0;
  return result;
}
static CUresult probe_free_managed(Row* row) {
  const CUresult result = cuMemFree(row->managed);
  if (result == CUDA_SUCCESS) row->managed = 0;
  return result;
}
static CUresult probe_prefetch(Row* row) {
  CUdevice device = 0;
  CUresult result = cuCtxGetDevice(&device);
  if (result != CUDA_SUCCESS) return result;
  const CUmemLocation to = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  return cuMemPrefetchAsync(row->managed, BYTES, to, 0, row->other);
}
static CUresult probe_advise(Row* row) {
  const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  return cuMemAdvise(row->managed, BYTES, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
}
static CUmemAllocationProp granule_prop(void) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUdevice device = 0;
  cuCtxGetDevice(&device);
  prop.location.id = device;
  return prop;
}
static CUresult map_granule(Row* row) {
  CUresult result = cuMemMap(row->reserved, GRANULE, 0, row->handle, 0);
  if (result != CUDA_SUCCESS) return result;
  row->mapped = 1;
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = granule_prop().location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cuMemSetAccess(row->reserved, GRANULE, &access, 1);
}
static CUresult probe_create(Row* row) {
  (void)row;
  const CUmemAllocationProp prop = granule_prop();
  CUmemGenericAllocationHandle made = 0;
  const CUresult result = cuMemCreate(&made, GRANULE, &prop, 0);
  if (result == CUDA_SUCCESS) cuMemRelease(made);  /* release is probed on its own */
  return result;
}
static CUresult probe_release(Row* row) {
  const CUresult result = cuMemRelease(row->handle);
  if (result == CUDA_SUCCESS) row->handle = 0;
  return result;
}
static CUresult probe_map(Row* row) { return map_granule(row); }
static CUresult probe_unmap(Row* row) {
  const CUresult result = cuMemUnmap(row->reserved, GRANULE);
  if (result == CUDA_SUCCESS) row->mapped = 0;
  return result;
}
static CUresult probe_stream_synchronize(Row* row) { return cuStreamSynchronize(row->other); }
static CUresult probe_stream_query(Row* row) { return cuStreamQuery(row->other); }
static CUresult probe_event_query(Row* row) { return cuEventQuery(row->recorded); }
static CUresult probe_event_synchronize(Row* row) { return cuEventSynchronize(row->recorded); }
static CUresult probe_ctx_synchronize(Row* row) {
  (void)row;
  return cuCtxSynchronize();
}
static void CUDA_CB nothing(void* data) { (void)data; }
static CUresult probe_host_function(Row* row) {
  return cuLaunchHostFunc(row->other, nothing, NULL);
}
static CUresult probe_record(Row* row) { return cuEventRecord(row->recorded, row->other); }

typedef struct {
  const char* name;
  Probe probe;
  Probe prepare;  /* before the capture, if not null */
} Case;

static const Case kCases[] = {
    {"cuMemHostAlloc", probe_host_alloc, NULL},
    {"cuMemFreeHost", probe_free_host, NULL},
    {"cuMemHostRegister", probe_host_register, NULL},
    {"cuMemAlloc", probe_alloc, NULL},
    {"cuMemAllocManaged", probe_alloc_managed, NULL},
    {"cuMemFree (device memory)", probe_free, NULL},
    {"cuMemFree (managed memory)", probe_free_managed, NULL},
    {"cuMemPrefetchAsync (another stream)", probe_prefetch, NULL},
    {"cuMemAdvise", probe_advise, NULL},
    {"cuStreamSynchronize (another stream)", probe_stream_synchronize, NULL},
    {"cuStreamQuery (another stream)", probe_stream_query, NULL},
    {"cuEventQuery (recorded on another stream)", probe_event_query, NULL},
    {"cuEventSynchronize (recorded on another stream)", probe_event_synchronize, NULL},
    {"cuEventRecord (another stream)", probe_record, NULL},
    {"cuLaunchHostFunc (another stream)", probe_host_function, NULL},
    {"cuCtxSynchronize", probe_ctx_synchronize, NULL},
    {"cuMemCreate (a 2 MiB granule)", probe_create, NULL},
    {"cuMemRelease (an unmapped granule)", probe_release, NULL},
    {"cuMemMap + cuMemSetAccess", probe_map, NULL},
    {"cuMemUnmap", probe_unmap, map_granule},
};

typedef struct {
  Row* row;
  Probe probe;
} Call;

static void* call_on_other_thread(void* data) {
  Call* call = data;
  if (cuCtxSetCurrent(call->row->context) != CUDA_SUCCESS) {
    call->row->result = CUDA_ERROR_INVALID_CONTEXT;
    return NULL;
  }
  call->row->result = call->probe(call->row);
  return NULL;
}

static const char* error_name(CUresult result) {
  const char* name = NULL;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS && name != NULL ? name : "(unknown)";
}

/* Prints why `result` ended the probe early; 1. */
static int failed(const char* what, const char* call, CUresult result) {
  fprintf(stderr, "capture_probe: %s: %s for the row \"%s\"\n", what, error_name(result), call);
  return 1;
}

#define CHECK(what, expression)                                         \
  do {                                                                  \
    const CUresult checked_ = (expression);                             \
    if (checked_ != CUDA_SUCCESS) return failed(what, c->name, checked_); \
  } while (0)

/* One row: prepares, captures around the call on another thread, cleans up. */
static int probe_row(CUcontext context, const Case* c, CUdeviceptr scratch) {
  static char pageable[BYTES] __attribute__((aligned(4096)));
  Row row;
  memset(&row, 0, sizeof row);
  row.context = context;
  row.pageable = pageable;
  CUstream capturing = NULL;
  CHECK("cuStreamCreate", cuStreamCreate(&capturing, CU_STREAM_NON_BLOCKING));
  CHECK("cuStreamCreate", cuStreamCreate(&row.other, CU_STREAM_NON_BLOCKING));
  CHECK("cuEventCreate", cuEventCreate(&row.recorded, CU_EVENT_DISABLE_TIMING));
  CHECK("cuMemAlloc", cuMemAlloc(&row.device, BYTES));
  CHECK("cuMemAllocManaged", cuMemAllocManaged(&row.managed, BYTES, CU_MEM_ATTACH_GLOBAL));
  CHECK("cuMemHostAlloc", cuMemHostAlloc(&row.pinned, BYTES, CU_MEMHOSTALLOC_PORTABLE));
  const CUmemAllocationProp prop = granule_prop();
  CHECK("cuMemAddressReserve", cuMemAddressReserve(&row.reserved, GRANULE, GRANULE, 0, 0));
  CHECK("cuMemCreate", cuMemCreate(&row.handle, GRANULE, &prop, 0));
  if (c->prepare != NULL) CHECK("preparing the row", c->prepare(&row));
  CHECK("cuMemsetD32Async", cuMemsetD32Async(row.device, 1, BYTES / 4, row.other));
  CHECK("cuEventRecord", cuEventRecord(row.recorded, row.other));
  CHECK("cuCtxSynchronize", cuCtxSynchronize());

  CHECK("cuStreamBeginCapture", cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUresult before = cuMemsetD32Async(scratch, 2, 16, capturing);
  Call call = {&row, c->probe};
  pthread_t thread;
  if (pthread_create(&thread, NULL, call_on_other_thread, &call) != 0) {
    fprintf(stderr, "capture_probe: pthread_create failed\n");
    return 1;
  }
  pthread_join(thread, NULL);
  const CUresult after = cuMemsetD32Async(scratch, 3, 16, capturing);
  CUgraph graph = NULL;
  const CUresult ended = cuStreamEndCapture(capturing, &graph);
  const int valid = before == CUDA_SUCCESS && after == CUDA_SUCCESS && ended == CUDA_SUCCESS &&
                    graph != NULL;
  printf("  %-48s %-38s capture %s\n", c->name, error_name(row.result),
         valid ? "ended with its graph" : "broken");
  if (graph != NULL) CHECK("cuGraphDestroy", cuGraphDestroy(graph));

  CHECK("cuCtxSynchronize", cuCtxSynchronize());
  if (row.made != 0) CHECK("cuMemFree", cuMemFree(row.made));
  if (row.made_host == pageable) {
    CHECK("cuMemHostUnregister", cuMemHostUnregister(pageable));
  } else if (row.made_host != NULL) {
    CHECK("cuMemFreeHost", cuMemFreeHost(row.made_host));
  }
  if (row.pinned != NULL) CHECK("cuMemFreeHost", cuMemFreeHost(row.pinned));
  if (row.managed != 0) CHECK("cuMemFree", cuMemFree(row.managed));
  if (row.device != 0) CHECK("cuMemFree", cuMemFree(row.device));
  if (row.mapped) CHECK("cuMemUnmap", cuMemUnmap(row.reserved, GRANULE));
  if (row.handle != 0) CHECK("cuMemRelease", cuMemRelease(row.handle));
  CHECK("cuMemAddressFree", cuMemAddressFree(row.reserved, GRANULE));
  CHECK("cuEventDestroy", cuEventDestroy(row.recorded));
  CHECK("cuStreamDestroy", cuStreamDestroy(row.other));
  CHECK("cuStreamDestroy", cuStreamDestroy(capturing));
  return 0;
}

static const char kUsage[] =
    "Usage: capture_probe [--help]\n"
    "For each of a list of driver calls: while this thread captures a stream in global mode,\n"
    "another thread makes the call; prints what it returned and whether the capture still ended\n"
    "with its graph. Runs on a GPU, or on simcuda (LD_LIBRARY_PATH=build/simcuda).\n";

int main(int argc, char** argv) {
  const int usage_status = no_arguments(argc, argv, kUsage);
  if (usage_status >= 0) return usage_status;
  CUdevice device = 0;
  CUcontext context = NULL;
  CUdeviceptr scratch = 0;
  char name[128] = "";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS || cuMemAlloc(&scratch, 4096) != CUDA_SUCCESS) {
    fprintf(stderr, "capture_probe: no usable device 0\n");
    return 1;
  }
  cuDeviceGetName(name, sizeof name, device);
  printf("capture_probe: %s: each call made on another thread while this one captures a stream "
         "in global mode\n",
         name);
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; ++i)
    if (probe_row(context, &kCases[i], scratch) != 0) return 1;
  cuMemFree(scratch);
  cuDevicePrimaryCtxRelease(device);
  printf("capture_probe: done\n");
  return 0;
}
