/*
 * What tiered mode's moves cost on this machine (README.md, "Tiered mode"), measured with the
 * driver calls the shim makes, as a plain driver-API program (no shim): it runs unchanged on a
 * GPU, where tools/gpu-check.sh runs it, and on simcuda (LD_LIBRARY_PATH=build/simcuda), whose
 * figures are its cost model's and say so.
 *
 *   copies     bytes a second of a plain pinned cuMemcpy{HtoD,DtoH}Async against the mover's
 *              copy: cuMemcpyAsync between host-located VMM granules and device granules, each
 *              range mapped granule by granule as the arena maps them (timed with events);
 *   both ways  a host -> device and a device -> host copy at once, on two streams, against
 *              each alone, between pinned memory and the device and between VMM granules as
 *              the mover's two lanes copy: whether an eviction's copy must wait for a
 *              promotion's (the link's two directions are separate engines on a GPU);
 *   remaps     host time of one cuMemMap, cuMemSetAccess and cuMemUnmap of a 2 MiB granule,
 *              device- and host-located (what each granule of a move costs the remap window);
 *   runs       host time per granule of one cuMemSetAccess, and of one cuMemUnmap, over a run
 *              of 1, 8 and 64 granules mapped one by one (whether the driver takes a range over
 *              several mappings, and what a call per run instead of per granule saves);
 *   chunks     host time per MiB to map, set access to and unmap one handle of 2, 32 and
 *              64 MiB (what physical chunks larger than a granule would save);
 *   offsets    whether cuMemMap takes a granule of a 32 MiB handle at a nonzero offset, and
 *              maps the bytes at that offset (cuda.h says both "a multiple of the granularity"
 *              and "currently must be zero"): whether a pooled chunk could back single granules
 *              (shim/tiers/granule_chunks.h, Note [Chunks]);
 *   reads      bytes a second a kernel (vs_axpy_f32, y on the device) reads x from device
 *              memory, from host-located VMM granules (an evicted block touched in place) and
 *              from pinned zero-copy memory (host mode's spill pool);
 *   pointers   the pointer attributes of a device- and a host-located granule in the middle
 *              of a range mapped granule by granule (what a framework asking about a tiered
 *              block is told: its memory type, device, context, range, IPC and RDMA ability);
 *   allocs     host time of a cuMemAlloc and of its cuMemFree at 4 KiB, 64 MiB and 512 MiB (how
 *              their cost grows with the size: simcuda charges them per call, an assumption),
 *              and of a managed spill as the shim makes one (cuMemAllocManaged and its advice)
 *              and frees it, at 16 and 64 MiB (simcuda charges nothing for them, an assumption
 *              that makes a job re-spilling every step look cheap);
 *   prefetch   what a mover over managed memory would pay: bytes a second of cuMemPrefetchAsync
 *              of a managed range to the device and back at 2, 32 and 256 MiB, both directions
 *              at once on two streams, the host time of one call, and a device memset of a
 *              range that lives on the host (migrated on fault), per MiB (simcuda: prefetches at
 *              the link's rate, calls free, 20 us a faulted page: assumptions);
 *   host fns   what one cuLaunchHostFunc costs the work queued behind it on its stream: small
 *              memsets with an empty host function after each, against the same memsets alone
 *              (tiered mode queues one at each cuMemFreeAsync of a block it keeps; simcuda charges
 *              nothing for them, an assumption);
 *   pools      how much a fresh stream-ordered pool reserves for a first request of 1 MiB and
 *              of 40 MiB: the step by which a pool grows when a request does not fit, which the
 *              shim learns only after the call (README.md, "Stream-ordered pools").
 * Host-located granules are HOST_NUMA on the GPU's NUMA node where the driver has it, else HOST,
 * as the shim chooses (shim/tiers/driver_host_vmm_tier.cpp). Host times are the wall clock on a
 * GPU; on simcuda they are its modeled host clock, read through events on an idle stream (work
 * queued after a call starts no earlier than the call's modeled end), so they show what the
 * model charges, not simcuda's own CPU time.
 *
 * Usage: tier_probe [--kernels PATH] [--granules N] [--repeats N]
 * Exit status: 0 (also when the device cannot map host-located VMM memory: tiered mode is not
 * available there, and the one line says so); 1 when a driver call failed (the line names it;
 * one in a section stops that section only, which says so, and the others still run: on a lent
 * GPU, each is a fact measured once); 2 for bad arguments.
 */
#include <cuda.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GRANULE ((size_t)2 << 20)

typedef struct {
  const char* kernels; /* module image; NULL: a placeholder (simcuda loads anything) */
  size_t granules;
  int repeats;
} Options;

typedef struct {
  CUdevice device;
  CUstream stream;
  CUstream other_stream; /* the second direction of "both ways" */
  CUevent start, stop;
  CUmemLocation host; /* where host granules live */
  CUmemAccessDesc access;
  int simulated;
} Probe;

/* A VA range backed granule by granule, as the granule arena backs a block. */
typedef struct {
  CUdeviceptr base;
  size_t granules;
  CUmemGenericAllocationHandle* handles;
} Range;

static const char* error_name(CUresult result) {
  const char* name = NULL;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS ? name : "unknown CUresult";
}

/* Where a failed call inside a section goes: back to run_section(), which moves on to the next
 * (what the section had made stays made: the program ends soon). Outside one, the program ends. */
static jmp_buf section_stopped;
static int in_section = 0;

/* Prints the failed call, then stops the section, or leaves the program with status 1. */
#define MUST(call)                                                                          \
  do {                                                                                      \
    CUresult must_result_ = (call);                                                         \
    if (must_result_ != CUDA_SUCCESS) {                                                     \
      fprintf(stderr, "tier_probe: %s -> %s (line %d)\n", #call, error_name(must_result_), \
              __LINE__);                                                                    \
      fflush(stdout);                                                                       \
      if (in_section) longjmp(section_stopped, 1);                                          \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

/* Runs one section (a statement); a failed call stops it alone, and sets `stopped`. */
#define RUN_SECTION(name, statement)                                                    \
  do {                                                                                  \
    in_section = 1;                                                                     \
    if (setjmp(section_stopped) == 0) {                                                 \
      statement;                                                                        \
    } else {                                                                            \
      printf("tier_probe: the %s section stopped at the call above\n", name);           \
      fflush(stdout);                                                                   \
      stopped = 1;                                                                      \
    }                                                                                   \
    in_section = 0;                                                                     \
  } while (0)

static int usage(FILE* to, int status) {
  fprintf(to,
          "Usage: tier_probe [--kernels PATH] [--granules N] [--repeats N]\n"
          "Measures what tiered mode's moves cost here: pinned copies against the mover's\n"
          "copies between VMM granules, copies both ways at once, one granule's\n"
          "map/set-access/unmap, one call over runs of 1, 8 and 64 granules, handles of 2, 32\n"
          "and 64 MiB, a handle mapped from a nonzero offset, a kernel's reads of device,\n"
          "host-located VMM and pinned zero-copy memory, cuMemAlloc/cuMemFree by size, a\n"
          "managed spill made and freed, and a fresh pool's growth.\n"
          "  --kernels PATH  module with the vs_* kernels (build/simcuda/vs_kernels.fatbin);\n"
          "                  needed on a GPU for the reads (on simcuda any image loads)\n"
          "  --granules N    2 MiB granules per transfer (default 64: 128 MiB)\n"
          "  --repeats N     timings per figure, the median printed (default 5)\n"
          "On simcuda the figures are its cost model's (modeled), not a measurement.\n");
  return status;
}

static int parse(int argc, char** argv, Options* options) {
  options->kernels = NULL;
  options->granules = 64;
  options->repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    char* end = NULL;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      exit(usage(stdout, 0));
    } else if (strcmp(argv[i], "--kernels") == 0 && value != NULL) {
      options->kernels = value;
    } else if (strcmp(argv[i], "--granules") == 0 && value != NULL) {
      options->granules = (size_t)strtoull(value, &end, 10);
      if (*end != '\0' || options->granules == 0 || options->granules > 4096) {
        fprintf(stderr, "tier_probe: --granules '%s': expected 1 to 4096\n", value);
        return 2;
      }
    } else if (strcmp(argv[i], "--repeats") == 0 && value != NULL) {
      options->repeats = (int)strtol(value, &end, 10);
      if (*end != '\0' || options->repeats < 1 || options->repeats > 1000) {
        fprintf(stderr, "tier_probe: --repeats '%s': expected 1 to 1000\n", value);
        return 2;
      }
    } else {
      fprintf(stderr, "tier_probe: unexpected '%s'\n", argv[i]);
      return usage(stderr, 2);
    }
    ++i;
  }
  return 0;
}

static int compare_floats(const void* a, const void* b) {
  const float x = *(const float*)a, y = *(const float*)b;
  return (x > y) - (x < y);
}

static float median(float* values, int count) {
  qsort(values, (size_t)count, sizeof *values, compare_floats);
  return values[count / 2];
}

/* Attribute `attribute` of `device`, 0 where the driver does not know it (an older driver), as
 * the shim takes it. */
static int attribute_or_zero(CUdevice_attribute attribute, CUdevice device) {
  int value = 0;
  return cuDeviceGetAttribute(&value, attribute, device) == CUDA_SUCCESS ? value : 0;
}

/* The host location tiered mode would use, as shim/tiers/driver_host_vmm_tier.cpp picks it;
 * 0 when the device cannot map host-located VMM memory. */
static int host_location(CUdevice device, CUmemLocation* location) {
  if (attribute_or_zero(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                        device)) {
    int node = -1;
    if (cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device) == CUDA_SUCCESS &&
        node >= 0) {
      location->type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
      location->id = node;
      return 1;
    }
  }
  location->type = CU_MEM_LOCATION_TYPE_HOST;
  location->id = 0;
  return attribute_or_zero(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
}

/* A physical handle of `bytes` at `location`, as the granule arena makes them. */
static CUmemGenericAllocationHandle create_handle(CUmemLocation location, size_t bytes) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = location;
  CUmemGenericAllocationHandle handle = 0;
  MUST(cuMemCreate(&handle, bytes, &prop, 0));
  return handle;
}

static CUmemGenericAllocationHandle create_granule(CUmemLocation location) {
  return create_handle(location, GRANULE);
}

static Range map_range(const Probe* probe, CUmemLocation location, size_t granules) {
  Range range = {0, granules, calloc(granules, sizeof(CUmemGenericAllocationHandle))};
  if (range.handles == NULL) {
    fprintf(stderr, "tier_probe: out of memory\n");
    exit(1);
  }
  MUST(cuMemAddressReserve(&range.base, granules * GRANULE, GRANULE, 0, 0));
  for (size_t i = 0; i < granules; ++i) {
    range.handles[i] = create_granule(location);
    MUST(cuMemMap(range.base + i * GRANULE, GRANULE, 0, range.handles[i], 0));
    MUST(cuMemSetAccess(range.base + i * GRANULE, GRANULE, &probe->access, 1));
  }
  return range;
}

static void unmap_range(Range* range) {
  for (size_t i = 0; i < range->granules; ++i) {
    MUST(cuMemUnmap(range->base + i * GRANULE, GRANULE));
    MUST(cuMemRelease(range->handles[i]));
  }
  MUST(cuMemAddressFree(range->base, range->granules * GRANULE));
  free(range->handles);
}

/* Kinds of transfer timed by transfer(). */
typedef enum { kHtoD, kDtoH, kVmmCopy, kKernelRead } Transfer;

typedef struct {
  Transfer kind;
  CUdeviceptr to, from; /* kVmmCopy; kKernelRead: y, x */
  void* host;           /* kHtoD, kDtoH */
  CUfunction axpy;      /* kKernelRead */
} Work;

static void submit_on(CUstream stream, const Work* work, size_t bytes) {
  switch (work->kind) {
    case kHtoD:
      MUST(cuMemcpyHtoDAsync(work->to, work->host, bytes, stream));
      break;
    case kDtoH:
      MUST(cuMemcpyDtoHAsync(work->host, work->from, bytes, stream));
      break;
    case kVmmCopy:
      MUST(cuMemcpyAsync(work->to, work->from, bytes, stream));
      break;
    case kKernelRead: {
      CUdeviceptr y = work->to, x = work->from;
      float a = 1.0f;
      uint64_t n = bytes / sizeof(float);
      void* params[] = {&y, &x, &a, &n};
      MUST(cuLaunchKernel(work->axpy, 1024, 1, 1, 256, 1, 1, 0, stream, params, NULL));
      break;
    }
  }
}

static void submit(const Probe* probe, const Work* work, size_t bytes) {
  submit_on(probe->stream, work, bytes);
}

/* Bytes a second of `work` over `bytes`, the median of `repeats` timed runs after one untimed. */
static double transfer(const Probe* probe, const Work* work, size_t bytes, int repeats) {
  float times[1000];
  submit(probe, work, bytes);
  MUST(cuStreamSynchronize(probe->stream));
  for (int i = 0; i < repeats; ++i) {
    MUST(cuEventRecord(probe->start, probe->stream));
    submit(probe, work, bytes);
    MUST(cuEventRecord(probe->stop, probe->stream));
    MUST(cuEventSynchronize(probe->stop));
    MUST(cuEventElapsedTime(&times[i], probe->start, probe->stop));
  }
  const float ms = median(times, repeats);
  return ms > 0 ? (double)bytes / (ms / 1e3) : 0;
}

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* The start of a span of host time (see the header: the wall clock, or simcuda's model). */
static double host_mark(const Probe* probe) {
  if (probe->simulated) MUST(cuEventRecord(probe->start, probe->stream));
  return seconds_now();
}

/* Host seconds since `mark`, which was host_mark()'s answer; the next span starts here. */
static double host_seconds_since(const Probe* probe, double* mark) {
  double seconds = 0;
  if (probe->simulated) {
    float ms = 0;
    MUST(cuEventRecord(probe->stop, probe->stream));
    MUST(cuEventSynchronize(probe->stop));
    MUST(cuEventElapsedTime(&ms, probe->start, probe->stop));
    seconds = ms / 1e3;
  } else {
    seconds = seconds_now() - *mark;
  }
  *mark = host_mark(probe);
  return seconds;
}

/* Host microseconds of one map, set-access and unmap of a granule at `location`, each the median
 * over `repeats` rounds of 16 granules. */
static void remap_costs(const Probe* probe, CUmemLocation location, int repeats, double us[3]) {
  enum { kBatch = 16 };
  CUmemGenericAllocationHandle handles[kBatch];
  CUdeviceptr base = 0;
  float samples[3][1000];
  MUST(cuMemAddressReserve(&base, kBatch * GRANULE, GRANULE, 0, 0));
  for (int i = 0; i < kBatch; ++i) handles[i] = create_granule(location);
  for (int round = 0; round < repeats; ++round) {
    double mark = host_mark(probe);
    for (int i = 0; i < kBatch; ++i) MUST(cuMemMap(base + i * GRANULE, GRANULE, 0, handles[i], 0));
    samples[0][round] = (float)(host_seconds_since(probe, &mark) * 1e6 / kBatch);
    for (int i = 0; i < kBatch; ++i)
      MUST(cuMemSetAccess(base + i * GRANULE, GRANULE, &probe->access, 1));
    samples[1][round] = (float)(host_seconds_since(probe, &mark) * 1e6 / kBatch);
    for (int i = 0; i < kBatch; ++i) MUST(cuMemUnmap(base + i * GRANULE, GRANULE));
    samples[2][round] = (float)(host_seconds_since(probe, &mark) * 1e6 / kBatch);
  }
  for (int i = 0; i < 3; ++i) us[i] = median(samples[i], repeats);
  for (int i = 0; i < kBatch; ++i) MUST(cuMemRelease(handles[i]));
  MUST(cuMemAddressFree(base, kBatch * GRANULE));
}

static void print_rate(const char* what, double bytes_per_second) {
  printf("  %-58s %8.1f GB/s\n", what, bytes_per_second / 1e9);
}

static void probe_copies(const Probe* probe, const Options* options, Range* device_range,
                         Range* host_range) {
  const size_t bytes = options->granules * GRANULE;
  void* pinned = NULL;
  MUST(cuMemHostAlloc(&pinned, bytes, 0));
  memset(pinned, 1, bytes);
  printf("copies of %zu MiB (median of %d)\n", bytes >> 20, options->repeats);
  Work work = {kHtoD, device_range->base, 0, pinned, NULL};
  print_rate("pinned host -> device, cuMemcpyHtoDAsync", transfer(probe, &work, bytes,
                                                                   options->repeats));
  work = (Work){kDtoH, 0, device_range->base, pinned, NULL};
  print_rate("device -> pinned host, cuMemcpyDtoHAsync", transfer(probe, &work, bytes,
                                                                   options->repeats));
  work = (Work){kVmmCopy, device_range->base, host_range->base, NULL, NULL};
  print_rate("host VMM granules -> device granules (the mover's promotion)",
             transfer(probe, &work, bytes, options->repeats));
  work = (Work){kVmmCopy, host_range->base, device_range->base, NULL, NULL};
  print_rate("device granules -> host VMM granules (the mover's eviction)",
             transfer(probe, &work, bytes, options->repeats));
  MUST(cuMemFreeHost(pinned));
}

static void probe_remaps(const Probe* probe, const Options* options) {
  CUmemLocation device_location = {CU_MEM_LOCATION_TYPE_DEVICE, probe->device};
  const struct {
    const char* name;
    CUmemLocation location;
  } kinds[] = {{"device", device_location}, {"host", probe->host}};
  printf("one 2 MiB granule, host time (median of %d rounds of 16%s)\n", options->repeats,
         probe->simulated ? "; modeled" : "");
  for (size_t k = 0; k < 2; ++k) {
    double us[3];
    remap_costs(probe, kinds[k].location, options->repeats, us);
    printf("  %-6s granule: cuMemMap %.1f us, cuMemSetAccess %.1f us, cuMemUnmap %.1f us\n",
           kinds[k].name, us[0], us[1], us[2]);
  }
}

/* Bytes a second of `in` (host -> device) on the probe's stream and `out` (device -> host) on
 * the other stream, started together: both directions' bytes over the time until the later ends
 * (median of `repeats`). */
static double both_directions(const Probe* probe, const Work* in, const Work* out, size_t bytes,
                              int repeats) {
  float times[1000];
  CUevent other_stop;
  MUST(cuEventCreate(&other_stop, CU_EVENT_DEFAULT));
  for (int i = 0; i <= repeats; ++i) { /* the first run is untimed */
    MUST(cuEventRecord(probe->start, probe->stream));
    MUST(cuStreamWaitEvent(probe->other_stream, probe->start, 0));
    submit_on(probe->stream, in, bytes);
    submit_on(probe->other_stream, out, bytes);
    MUST(cuEventRecord(other_stop, probe->other_stream));
    MUST(cuStreamWaitEvent(probe->stream, other_stop, 0));
    MUST(cuEventRecord(probe->stop, probe->stream));
    MUST(cuEventSynchronize(probe->stop));
    if (i > 0) MUST(cuEventElapsedTime(&times[i - 1], probe->start, probe->stop));
  }
  MUST(cuEventDestroy(other_stop));
  const float ms = median(times, repeats);
  return ms > 0 ? 2.0 * (double)bytes / (ms / 1e3) : 0;
}

/* One direction alone, the other alone, and both at once: the rates and how the time compares
 * with the two one after the other. */
static void print_both_directions(const Probe* probe, const Options* options, const char* what,
                                  const Work* in, const Work* out, size_t bytes) {
  const double in_alone = transfer(probe, in, bytes, options->repeats);
  const double out_alone = transfer(probe, out, bytes, options->repeats);
  const double both = both_directions(probe, in, out, bytes, options->repeats);
  printf("  %s\n", what);
  print_rate("host -> device alone", in_alone);
  print_rate("device -> host alone", out_alone);
  print_rate("both at once, the two directions' bytes together", both);
  if (in_alone > 0 && out_alone > 0 && both > 0)
    printf("  both at once: %.2fx the time of the two one after the other\n",
           (2.0 * (double)bytes / both) /
               ((double)bytes / in_alone + (double)bytes / out_alone));
}

static void probe_both_directions(const Probe* probe, const Options* options,
                                  Range* device_range, Range* host_range) {
  const size_t bytes = options->granules * GRANULE / 2;
  void* pinned = NULL;
  MUST(cuMemHostAlloc(&pinned, 2 * bytes, 0));
  memset(pinned, 1, 2 * bytes);
  char* host_in = pinned;
  char* host_out = host_in + bytes;
  const CUdeviceptr to = device_range->base, from = device_range->base + bytes;
  printf("copies in both directions at once, %zu MiB each way on two streams (median of %d)\n",
         bytes >> 20, options->repeats);
  Work in = {kHtoD, to, 0, host_in, NULL};
  Work out = {kDtoH, 0, from, host_out, NULL};
  print_both_directions(probe, options, "pinned host memory, cuMemcpy{HtoD,DtoH}Async", &in, &out,
                        bytes);
  /* The mover's two lanes (Note [Two copy lanes] in shim/tiers/granule_ops.h). */
  in = (Work){kVmmCopy, to, host_range->base, NULL, NULL};
  out = (Work){kVmmCopy, host_range->base + bytes, from, NULL, NULL};
  print_both_directions(probe, options,
                        "VMM granules, cuMemcpyAsync (the mover's promotions and evictions)", &in,
                        &out, bytes);
  MUST(cuMemFreeHost(pinned));
}

/* Host microseconds per granule of one cuMemSetAccess and of one cuMemUnmap over a run of
 * `run` granules, each mapped on its own (median of `repeats`); us[1] is negative when the
 * driver refused to unmap several mappings in one call, and then each is unmapped alone. */
static void run_costs(const Probe* probe, CUmemLocation location, size_t run, int repeats,
                      double us[2]) {
  CUmemGenericAllocationHandle* handles = calloc(run, sizeof *handles);
  float samples[2][1000];
  CUdeviceptr base = 0;
  int refused = 0;
  if (handles == NULL) {
    fprintf(stderr, "tier_probe: out of memory\n");
    exit(1);
  }
  MUST(cuMemAddressReserve(&base, run * GRANULE, GRANULE, 0, 0));
  for (size_t i = 0; i < run; ++i) handles[i] = create_granule(location);
  for (int round = 0; round < repeats; ++round) {
    for (size_t i = 0; i < run; ++i) MUST(cuMemMap(base + i * GRANULE, GRANULE, 0, handles[i], 0));
    double mark = host_mark(probe);
    MUST(cuMemSetAccess(base, run * GRANULE, &probe->access, 1));
    samples[0][round] = (float)(host_seconds_since(probe, &mark) * 1e6 / (double)run);
    if (cuMemUnmap(base, run * GRANULE) != CUDA_SUCCESS) {
      refused = 1;
      for (size_t i = 0; i < run; ++i) MUST(cuMemUnmap(base + i * GRANULE, GRANULE));
    }
    samples[1][round] = (float)(host_seconds_since(probe, &mark) * 1e6 / (double)run);
  }
  us[0] = median(samples[0], repeats);
  us[1] = refused ? -1.0 : median(samples[1], repeats);
  for (size_t i = 0; i < run; ++i) MUST(cuMemRelease(handles[i]));
  MUST(cuMemAddressFree(base, run * GRANULE));
  free(handles);
}

/* Host microseconds per MiB to map, set access to and unmap one handle of `bytes`. */
static double chunk_cost(const Probe* probe, CUmemLocation location, size_t bytes,
                         int repeats) {
  const CUmemGenericAllocationHandle handle = create_handle(location, bytes);
  CUdeviceptr base = 0;
  float samples[1000];
  MUST(cuMemAddressReserve(&base, bytes, GRANULE, 0, 0));
  for (int round = 0; round < repeats; ++round) {
    double mark = host_mark(probe);
    MUST(cuMemMap(base, bytes, 0, handle, 0));
    MUST(cuMemSetAccess(base, bytes, &probe->access, 1));
    MUST(cuMemUnmap(base, bytes));
    samples[round] = (float)(host_seconds_since(probe, &mark) * 1e6 / (double)(bytes >> 20));
  }
  MUST(cuMemAddressFree(base, bytes));
  MUST(cuMemRelease(handle));
  return median(samples, repeats);
}

static void probe_runs_and_chunks(const Probe* probe, const Options* options) {
  CUmemLocation device_location = {CU_MEM_LOCATION_TYPE_DEVICE, probe->device};
  const struct {
    const char* name;
    CUmemLocation location;
  } kinds[] = {{"device", device_location}, {"host", probe->host}};
  const char* modeled = probe->simulated ? "; modeled" : "";
  printf("one call over a run of granules, host time per granule (median of %d%s)\n",
         options->repeats, modeled);
  const size_t runs[] = {1, 8, 64};
  for (size_t k = 0; k < 2; ++k) {
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; ++r) {
      double us[2];
      run_costs(probe, kinds[k].location, runs[r], options->repeats, us);
      printf("  %-6s run of %2zu: cuMemSetAccess %.1f us, ", kinds[k].name, runs[r], us[0]);
      if (us[1] < 0) {
        printf("one cuMemUnmap over the run refused by the driver\n");
      } else {
        printf("cuMemUnmap %.1f us\n", us[1]);
      }
    }
  }
  printf("one handle mapped, given access and unmapped, host time per MiB (median of %d%s)\n",
         options->repeats, modeled);
  const size_t chunks[] = {(size_t)2 << 20, (size_t)32 << 20, (size_t)64 << 20};
  for (size_t k = 0; k < 2; ++k) {
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; ++c) {
      printf("  %-6s chunk of %2zu MiB: %.2f us per MiB\n", kinds[k].name, chunks[c] >> 20,
             chunk_cost(probe, kinds[k].location, chunks[c], options->repeats));
    }
  }
}

/* Whether cuMemMap maps granule 1 of a 32 MiB handle at `location` on its own, and whether the
 * bytes seen there are those at the handle's offset 2 MiB (written through a mapping of the whole
 * handle). Prints one line. */
static void offset_map(const Probe* probe, CUmemLocation location, const char* kind) {
  const size_t bytes = (size_t)32 << 20;
  const CUmemGenericAllocationHandle handle = create_handle(location, bytes);
  CUdeviceptr whole = 0;
  CUdeviceptr part = 0;
  MUST(cuMemAddressReserve(&whole, bytes, GRANULE, 0, 0));
  MUST(cuMemAddressReserve(&part, GRANULE, GRANULE, 0, 0));
  MUST(cuMemMap(whole, bytes, 0, handle, 0));
  MUST(cuMemSetAccess(whole, bytes, &probe->access, 1));
  MUST(cuMemsetD8Async(whole, 0x11, bytes, probe->stream));
  MUST(cuMemsetD8Async(whole + GRANULE, 0xab, GRANULE, probe->stream));
  MUST(cuStreamSynchronize(probe->stream));
  const CUresult mapped = cuMemMap(part, GRANULE, GRANULE, handle, 0);
  printf("  %-6s granule at offset 2 MiB of a 32 MiB handle: cuMemMap -> %s", kind,
         error_name(mapped));
  if (mapped == CUDA_SUCCESS) {
    unsigned char seen[4096];
    MUST(cuMemSetAccess(part, GRANULE, &probe->access, 1));
    MUST(cuMemcpyDtoH(seen, part + GRANULE / 2, sizeof seen));
    size_t at_offset = 0;
    for (size_t i = 0; i < sizeof seen; ++i) at_offset += seen[i] == 0xab;
    printf(", %s\n", at_offset == sizeof seen ? "maps the bytes at that offset"
                                                : "maps other bytes than the offset's");
    MUST(cuMemUnmap(part, GRANULE));
  } else {
    printf("\n");
  }
  MUST(cuMemUnmap(whole, bytes));
  MUST(cuMemAddressFree(part, GRANULE));
  MUST(cuMemAddressFree(whole, bytes));
  MUST(cuMemRelease(handle));
}

static void probe_offsets(const Probe* probe) {
  CUmemLocation device_location = {CU_MEM_LOCATION_TYPE_DEVICE, probe->device};
  printf("a handle mapped from a nonzero offset%s\n",
         probe->simulated ? " (simcuda's answer, an assumption)" : "");
  offset_map(probe, device_location, "device");
  offset_map(probe, probe->host, "host");
}

/* One pointer attribute of `address`, as a row: the driver's answer, and the value read as the
 * integer (or pointer) it is, its low 8 bytes; a context printed as the current one or not. */
static void pointer_row(const char* label, CUpointer_attribute attribute, const char* name,
                        CUdeviceptr address, CUdeviceptr range_base) {
  unsigned long long value = 0;
  const CUresult result = cuPointerGetAttribute(&value, attribute, address);
  printf("  %-16s %-28s %s", label, name, error_name(result));
  if (result == CUDA_SUCCESS) {
    if (attribute == CU_POINTER_ATTRIBUTE_CONTEXT) {
      CUcontext current = NULL;
      cuCtxGetCurrent(&current);
      printf(", %s", (CUcontext)(uintptr_t)value == current ? "the current context" : "another");
    } else if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
      printf(", the reservation's start %+lld MiB", ((long long)value - (long long)range_base) >> 20);
    } else if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
      printf(", %llu MiB", value >> 20);
    } else {
      printf(", %llu", value & 0xffffffffull);
    }
  }
  printf("\n");
}

/* What a program (a framework choosing a copy path, an MPI checking what it may register) is told
 * about a tiered block: the pointer attributes of a granule in the middle of a range mapped
 * granule by granule, device-located and host-located (an evicted one). MEMORY_TYPE 2 is
 * CU_MEMORYTYPE_DEVICE, 1 HOST. */
static void probe_pointers(const Probe* probe, const Range* device_range, const Range* host_range) {
  static const struct {
    CUpointer_attribute attribute;
    const char* name;
  } kAttributes[] = {{CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "MEMORY_TYPE"},
                     {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "DEVICE_ORDINAL"},
                     {CU_POINTER_ATTRIBUTE_CONTEXT, "CONTEXT"},
                     {CU_POINTER_ATTRIBUTE_MAPPED, "MAPPED"},
                     {CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, "IS_GPU_DIRECT_RDMA_CAPABLE"},
                     {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, "IS_LEGACY_CUDA_IPC_CAPABLE"},
                     {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "RANGE_START_ADDR"},
                     {CU_POINTER_ATTRIBUTE_RANGE_SIZE, "RANGE_SIZE"}};
  const Range* ranges[] = {device_range, host_range};
  const char* labels[] = {"device granule", "host granule"};
  printf("pointer attributes of granule 1 of %zu, each mapped alone (what a program is told of a "
         "tiered block)%s\n",
         device_range->granules, probe->simulated ? " (simcuda's answers)" : "");
  for (int r = 0; r < 2; ++r) {
    if (ranges[r]->granules < 2) continue;
    for (size_t i = 0; i < sizeof kAttributes / sizeof kAttributes[0]; ++i)
      pointer_row(labels[r], kAttributes[i].attribute, kAttributes[i].name,
                  ranges[r]->base + GRANULE + 4096, ranges[r]->base);
  }
}

static void probe_reads(const Probe* probe, const Options* options, Range* host_range) {
  const size_t bytes = options->granules * GRANULE;
  CUmodule module;
  CUfunction axpy;
  CUresult loaded = options->kernels != NULL
                        ? cuModuleLoad(&module, options->kernels)
                        : cuModuleLoadData(&module, "placeholder: simcuda accepts any image");
  if (loaded != CUDA_SUCCESS) {
    printf("kernel reads: skipped, the vs_* kernels did not load (%s); pass --kernels "
           "build/simcuda/vs_kernels.fatbin\n", error_name(loaded));
    return;
  }
  MUST(cuModuleGetFunction(&axpy, module, "vs_axpy_f32"));
  CUdeviceptr y = 0, x_device = 0, x_pinned = 0;
  void* pinned = NULL;
  MUST(cuMemAlloc(&y, bytes));
  MUST(cuMemAlloc(&x_device, bytes));
  MUST(cuMemsetD32(y, 0, bytes / 4));
  MUST(cuMemsetD32(x_device, 0, bytes / 4));
  MUST(cuMemsetD32(host_range->base, 0, bytes / 4));
  MUST(cuMemHostAlloc(&pinned, bytes, CU_MEMHOSTALLOC_DEVICEMAP));
  memset(pinned, 0, bytes);
  MUST(cuMemHostGetDevicePointer(&x_pinned, pinned, 0));
  printf("kernel reads of x in y = a*x + y over %zu MiB, y on the device: x's bytes over the\n"
         "kernel's time, which also reads and writes y (so device memory shows about a third of\n"
         "its bandwidth; the host rows compare with each other) (median of %d)\n",
         bytes >> 20, options->repeats);
  const struct {
    const char* name;
    CUdeviceptr x;
  } sources[] = {{"x in device memory", x_device},
                 {"x in host VMM granules (an evicted block in place)", host_range->base},
                 {"x in pinned zero-copy memory (host mode's pool)", x_pinned}};
  double rates[3];
  for (size_t s = 0; s < 3; ++s) {
    Work work = {kKernelRead, y, sources[s].x, NULL, axpy};
    rates[s] = transfer(probe, &work, bytes, options->repeats);
    print_rate(sources[s].name, rates[s]);
  }
  if (rates[2] > 0)
    printf("  host VMM granules read at %.2fx the rate of pinned zero-copy memory\n",
           rates[1] / rates[2]);
  MUST(cuMemFreeHost(pinned));
  MUST(cuMemFree(x_device));
  MUST(cuMemFree(y));
  MUST(cuModuleUnload(module));
}

/* Allocations whose host time probe_allocations() measures. */
typedef enum {
  kLinear,      /* cuMemAlloc, cuMemFree */
  kManagedSpill /* as the shim spills: cuMemAllocManaged, advised to stay on the host and to be
                 * mapped for the device, then cuMemFree */
} Allocation;

/* Makes `*block` of `bytes` as `kind` says; CUDA_ERROR_OUT_OF_MEMORY where there is no room. */
static CUresult allocate(const Probe* probe, Allocation kind, size_t bytes, CUdeviceptr* block) {
  if (kind == kLinear) return cuMemAlloc(block, bytes);
  CUresult result = cuMemAllocManaged(block, bytes, CU_MEM_ATTACH_GLOBAL);
  if (result != CUDA_SUCCESS) return result;
  const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  const CUmemLocation device = {CU_MEM_LOCATION_TYPE_DEVICE, probe->device};
  MUST(cuMemAdvise(*block, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  MUST(cuMemAdvise(*block, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, device));
  return CUDA_SUCCESS;
}

static void probe_allocations(const Probe* probe, const Options* options, Allocation kind) {
  printf("%s, host time (median of %d%s)\n",
         kind == kLinear ? "cuMemAlloc and cuMemFree"
                         : "a managed spill: cuMemAllocManaged with its two cuMemAdvise, cuMemFree",
         options->repeats, probe->simulated ? "; modeled" : "");
  const size_t linear[] = {(size_t)4 << 10, (size_t)64 << 20, (size_t)512 << 20};
  const size_t managed[] = {(size_t)16 << 20, (size_t)64 << 20};
  const size_t* sizes = kind == kLinear ? linear : managed;
  const size_t count = kind == kLinear ? sizeof linear / sizeof linear[0]
                                       : sizeof managed / sizeof managed[0];
  for (size_t i = 0; i < count; ++i) {
    float made[1000], freed[1000];
    int rounds = 0;
    for (; rounds < options->repeats; ++rounds) {
      CUdeviceptr block = 0;
      double mark = host_mark(probe);
      if (allocate(probe, kind, sizes[i], &block) != CUDA_SUCCESS) break; /* no room here */
      made[rounds] = (float)(host_seconds_since(probe, &mark) * 1e6);
      MUST(cuMemFree(block));
      freed[rounds] = (float)(host_seconds_since(probe, &mark) * 1e6);
    }
    if (rounds == 0) {
      printf("  %9zu KiB: cannot be allocated here\n", sizes[i] >> 10);
      continue;
    }
    printf("  %9zu KiB: %s %.1f us, cuMemFree %.1f us\n", sizes[i] >> 10,
           kind == kLinear ? "cuMemAlloc" : "allocated and advised", median(made, rounds),
           median(freed, rounds));
  }
}

/* A managed range of `bytes` whose pages are on the device (written there once). */
static CUdeviceptr managed_on_device(const Probe* probe, size_t bytes) {
  CUdeviceptr range = 0;
  MUST(cuMemAllocManaged(&range, bytes, CU_MEM_ATTACH_GLOBAL));
  MUST(cuMemsetD8Async(range, 1, bytes, probe->stream));
  const CUmemLocation device = {CU_MEM_LOCATION_TYPE_DEVICE, probe->device};
  MUST(cuMemPrefetchAsync(range, bytes, device, 0, probe->stream));
  MUST(cuStreamSynchronize(probe->stream));
  return range;
}

/* Milliseconds between the probe's start and stop events, once stop has passed. */
static float elapsed_ms(const Probe* probe) {
  float ms = 0;
  MUST(cuEventSynchronize(probe->stop));
  MUST(cuEventElapsedTime(&ms, probe->start, probe->stop));
  return ms;
}

/* Bytes a second of a prefetch of `range` to the host and back to the device, each the median of
 * `repeats`: rates[0] to the device, rates[1] to the host. */
static void prefetch_rates(const Probe* probe, CUdeviceptr range, size_t bytes, int repeats,
                           double rates[2]) {
  const CUmemLocation to[2] = {{CU_MEM_LOCATION_TYPE_DEVICE, probe->device},
                               {CU_MEM_LOCATION_TYPE_HOST, 0}};
  float times[2][1000];
  for (int round = 0; round < repeats; ++round) {
    for (int way = 1; way >= 0; --way) { /* out first: the range starts on the device */
      MUST(cuEventRecord(probe->start, probe->stream));
      MUST(cuMemPrefetchAsync(range, bytes, to[way], 0, probe->stream));
      MUST(cuEventRecord(probe->stop, probe->stream));
      times[way][round] = elapsed_ms(probe);
    }
  }
  for (int way = 0; way < 2; ++way) {
    const float ms = median(times[way], repeats);
    rates[way] = ms > 0 ? (double)bytes / (ms / 1e3) : 0;
  }
}

static void probe_prefetch(const Probe* probe, const Options* options) {
  printf("prefetches of managed memory, as a mover over managed memory would move a block "
         "(median of %d%s)\n", options->repeats, probe->simulated ? "; modeled" : "");
  const size_t sizes[] = {(size_t)2 << 20, (size_t)32 << 20, (size_t)256 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const CUdeviceptr range = managed_on_device(probe, sizes[i]);
    double rates[2];
    prefetch_rates(probe, range, sizes[i], options->repeats, rates);
    printf("  %3zu MiB: to the device %.1f GB/s, to the host %.1f GB/s\n", sizes[i] >> 20,
           rates[0] / 1e9, rates[1] / 1e9);
    MUST(cuMemFree(range));
  }
  /* Both directions at once: one range goes out on the other stream while another comes in. */
  const size_t bytes = (size_t)32 << 20;
  const CUmemLocation device = {CU_MEM_LOCATION_TYPE_DEVICE, probe->device};
  const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  const CUdeviceptr out = managed_on_device(probe, bytes);
  const CUdeviceptr in = managed_on_device(probe, bytes);
  float times[1000];
  CUevent other_stop;
  MUST(cuEventCreate(&other_stop, CU_EVENT_DEFAULT));
  for (int round = 0; round < options->repeats; ++round) {
    MUST(cuMemPrefetchAsync(in, bytes, host, 0, probe->stream));
    MUST(cuMemPrefetchAsync(out, bytes, device, 0, probe->stream));
    MUST(cuEventRecord(probe->start, probe->stream));
    MUST(cuStreamWaitEvent(probe->other_stream, probe->start, 0));
    MUST(cuMemPrefetchAsync(in, bytes, device, 0, probe->stream));
    MUST(cuMemPrefetchAsync(out, bytes, host, 0, probe->other_stream));
    MUST(cuEventRecord(other_stop, probe->other_stream));
    MUST(cuStreamWaitEvent(probe->stream, other_stop, 0));
    MUST(cuEventRecord(probe->stop, probe->stream));
    times[round] = elapsed_ms(probe);
  }
  const float both_ms = median(times, options->repeats);
  printf("  both at once, 32 MiB each way on two streams, the two directions' bytes together: "
         "%.1f GB/s\n", both_ms > 0 ? 2.0 * (double)bytes / (both_ms / 1e3) / 1e9 : 0.0);
  MUST(cuEventDestroy(other_stop));
  /* The host time of one call, and a device memset of the range while it lives on the host. */
  float call_us[1000], fault_us[1000];
  for (int round = 0; round < options->repeats; ++round) {
    MUST(cuMemPrefetchAsync(in, bytes, host, 0, probe->stream));
    MUST(cuMemPrefetchAsync(out, bytes, host, 0, probe->stream));
    MUST(cuStreamSynchronize(probe->stream));
    double mark = host_mark(probe);
    MUST(cuMemPrefetchAsync(out, bytes, device, 0, probe->other_stream));
    call_us[round] = (float)(host_seconds_since(probe, &mark) * 1e6);
    MUST(cuStreamSynchronize(probe->other_stream));
    MUST(cuEventRecord(probe->start, probe->stream));
    MUST(cuMemsetD8Async(in, 2, bytes, probe->stream));
    MUST(cuEventRecord(probe->stop, probe->stream));
    fault_us[round] = elapsed_ms(probe) * 1e3f / (float)(bytes >> 20);
  }
  printf("  host time of one cuMemPrefetchAsync call: %.1f us\n", median(call_us, options->repeats));
  printf("  a device memset of 32 MiB that lives on the host (migrated on fault): %.1f us per "
         "MiB\n", median(fault_us, options->repeats));
  MUST(cuMemFree(in));
  MUST(cuMemFree(out));
}

static void CUDA_CB do_nothing(void* data) { (void)data; }

/* Milliseconds a stream takes for `count` small memsets, each followed by an empty host function
 * when `with_host_functions`. */
static float memsets_ms(const Probe* probe, CUdeviceptr target, int count,
                        int with_host_functions) {
  MUST(cuEventRecord(probe->start, probe->stream));
  for (int i = 0; i < count; ++i) {
    MUST(cuMemsetD8Async(target, (unsigned char)i, 4096, probe->stream));
    if (with_host_functions) MUST(cuLaunchHostFunc(probe->stream, do_nothing, NULL));
  }
  MUST(cuEventRecord(probe->stop, probe->stream));
  return elapsed_ms(probe);
}

static void probe_host_functions(const Probe* probe, const Options* options) {
  enum { kCount = 100 };
  printf("host functions on a stream, as tiered mode queues one at each cuMemFreeAsync it keeps "
         "(median of %d%s)\n", options->repeats, probe->simulated ? "; modeled" : "");
  CUdeviceptr target = 0;
  MUST(cuMemAlloc(&target, 4096));
  float alone[1000], with[1000];
  for (int round = 0; round < options->repeats; ++round) {
    alone[round] = memsets_ms(probe, target, kCount, 0);
    with[round] = memsets_ms(probe, target, kCount, 1);
  }
  const float extra_ms = median(with, options->repeats) - median(alone, options->repeats);
  printf("  %d memsets of 4 KiB: %.1f us alone, %.1f us with a host function after each: "
         "%.1f us a host function\n", kCount, median(alone, options->repeats) * 1e3f,
         median(with, options->repeats) * 1e3f, extra_ms * 1e3f / kCount);
  MUST(cuMemFree(target));
}

/* What a fresh pool of the device reserves once it serves one request of `bytes`. */
static size_t pool_reserve_after(const Probe* probe, size_t bytes) {
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = probe->device;
  CUmemoryPool pool;
  MUST(cuMemPoolCreate(&pool, &props));
  CUdeviceptr block;
  MUST(cuMemAllocFromPoolAsync(&block, bytes, pool, probe->stream));
  cuuint64_t reserved = 0;
  MUST(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  MUST(cuMemFreeAsync(block, probe->stream));
  MUST(cuStreamSynchronize(probe->stream));
  MUST(cuMemPoolDestroy(pool));
  return (size_t)reserved;
}

static void probe_pool_growth(const Probe* probe) {
  printf("a fresh stream-ordered pool's reserve after its first request\n");
  const size_t sizes[] = {(size_t)1 << 20, (size_t)40 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    printf("  %4zu MiB request: %zu MiB reserved\n", sizes[i] >> 20,
           pool_reserve_after(probe, sizes[i]) >> 20);
  }
}

int main(int argc, char** argv) {
  Options options;
  const int parsed = parse(argc, argv, &options);
  if (parsed != 0) return parsed;
  Probe probe;
  memset(&probe, 0, sizeof probe);
  CUcontext context;
  char name[128];
  int version = 0;
  MUST(cuInit(0));
  MUST(cuDeviceGet(&probe.device, 0));
  MUST(cuDeviceGetName(name, sizeof name, probe.device));
  MUST(cuDriverGetVersion(&version));
  probe.simulated = strncmp(name, "simcuda", 7) == 0;
  if (!host_location(probe.device, &probe.host)) {
    printf("tier_probe: %s cannot map host-located VMM memory: tiered mode is not available "
           "here, nothing to measure\n", name);
    return 0;
  }
  MUST(cuDevicePrimaryCtxRetain(&context, probe.device));
  MUST(cuCtxSetCurrent(context));
  MUST(cuStreamCreate(&probe.stream, CU_STREAM_NON_BLOCKING));
  MUST(cuStreamCreate(&probe.other_stream, CU_STREAM_NON_BLOCKING));
  MUST(cuEventCreate(&probe.start, CU_EVENT_DEFAULT));
  MUST(cuEventCreate(&probe.stop, CU_EVENT_DEFAULT));
  probe.access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  probe.access.location.id = probe.device;
  probe.access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  char host[48];
  if (probe.host.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    snprintf(host, sizeof host, "HOST_NUMA node %d", probe.host.id);
  } else {
    snprintf(host, sizeof host, "HOST");
  }
  printf("tier_probe on %s (driver %d), host granules %s; %s\n", name, version, host,
         probe.simulated ? "figures modeled by simcuda, not measured"
                         : "times measured by CUDA events and the host clock");

  CUmemLocation device_location = {CU_MEM_LOCATION_TYPE_DEVICE, probe.device};
  Range device_range = map_range(&probe, device_location, options.granules);
  Range host_range = map_range(&probe, probe.host, options.granules);
  volatile int stopped = 0;
  RUN_SECTION("copies", probe_copies(&probe, &options, &device_range, &host_range));
  RUN_SECTION("both ways", probe_both_directions(&probe, &options, &device_range, &host_range));
  RUN_SECTION("remaps", probe_remaps(&probe, &options));
  RUN_SECTION("runs and chunks", probe_runs_and_chunks(&probe, &options));
  RUN_SECTION("offsets", probe_offsets(&probe));
  RUN_SECTION("reads", probe_reads(&probe, &options, &host_range));
  RUN_SECTION("pointers", probe_pointers(&probe, &device_range, &host_range));
  RUN_SECTION("allocs", probe_allocations(&probe, &options, kLinear));
  RUN_SECTION("managed spills", probe_allocations(&probe, &options, kManagedSpill));
  RUN_SECTION("prefetch", probe_prefetch(&probe, &options));
  RUN_SECTION("host fns", probe_host_functions(&probe, &options));
  RUN_SECTION("pools", probe_pool_growth(&probe));
  if (stopped) {
    /* What the stopped sections made may still be mapped: the driver's part is left to the exit,
     * and the ranges' books are let go. */
    free(host_range.handles);
    free(device_range.handles);
    printf("tier_probe: done, with sections stopped\n");
    fflush(stdout);
    return 1;
  }
  unmap_range(&host_range);
  unmap_range(&device_range);
  MUST(cuEventDestroy(probe.stop));
  MUST(cuEventDestroy(probe.start));
  MUST(cuStreamDestroy(probe.other_stream));
  MUST(cuStreamDestroy(probe.stream));
  MUST(cuDevicePrimaryCtxRelease(probe.device));
  printf("tier_probe: done\n");
  return 0;
}
