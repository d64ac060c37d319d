/*
 * train_demo: a training-like CUDA driver-API program whose working set is several times the
 * device memory it is told about. It is the main job of README command (1) (tools/demo.sh).
 *
 * What it models. A network of L "layers"; each layer owns four tensors of the same size, each
 * its own cuMemAlloc block (at most --chunk bytes), allocated in the order a framework's first
 * iteration creates them: parameters (model load), activations (forward), gradients (backward),
 * momentum (the optimizer's first step). Every step then runs, layer by layer, on one stream:
 *
 *   forward   a = p;  a += 1.0 * p                    (vs_copy, vs_axpy_f32)   a = 2p
 *   backward  g = 0;  g += 0.25 * a                   (vs_fill_u32, vs_axpy_f32)
 *   update    m += -0.5 * m;  m += 1.0 * g            (momentum: m = 0.5 m + g)
 *             p += -0.125 * m                         (SGD, learning rate 2^-3)
 *
 * Parameters start as small integers (1..61, by element and layer), momentum as 0, gradients and
 * activations as a NaN pattern (so a kernel that never ran is caught). All factors are powers of
 * two, so for the first four steps every value is exact (checked with rational arithmetic);
 * beyond that, both sides round identically (vs_axpy_f32 rounds its multiply and its add
 * separately: __fmul_rn/__fadd_rn on a GPU, host code in simcuda; the reference below does the
 * same, and this file is built with -ffp-contract=off). After the last step every element
 * of every block is copied back (one block at a time, through one reusable host buffer: host
 * memory never grows with the working set) and compared bit for bit with the host's reference.
 *
 * Sizing: the working set is --factor (default 3) times the total cuMemGetInfo reports (the
 * device's memory; under vramspill, the job's budget), or --bytes. Without vramspill it does
 * not fit and an allocation fails with CUDA_ERROR_OUT_OF_MEMORY, before any data is written.
 *
 * It is plain C against the toolkit's cuda.h, linked to the stub libcuda.so, so the same binary
 * runs on a GPU (pass --kernels with the nvcc-built vs_kernels.fatbin) and on simcuda (any image
 * loads there). Exit status: 0 verified, 2 CUDA_ERROR_OUT_OF_MEMORY, 3 verification mismatch,
 * 1 any other error.
 */
#define _GNU_SOURCE /* dlvsym */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kOk = 0, kError = 1, kOutOfMemory = 2, kMismatch = 3 };

/* The four tensors of a layer, in allocation (and verification) order. */
enum { kParams, kActs, kGrads, kMomentum, kRoles };
static const char* const kRoleName[kRoles] = {"parameters", "activations", "gradients",
                                              "momentum"};

#define MiB ((size_t)1 << 20)
#define kPeriod 61u                 /* initial parameter values are 1..kPeriod */
#define kLayerShift 7u              /* layer k starts kLayerShift*k further into the pattern */
#define kPoison 0x7fc0deadu         /* a quiet NaN: gradients and activations before step 1 */
#define kLearningRate 0.125f        /* 2^-3 */
#define kMomentumDecay 0.5f

/* ------------------------------------------------------------------------------------------ */
/* Options                                                                                     */

typedef struct {
  double factor;      /* working set = factor * cuMemGetInfo total, unless bytes != 0 */
  size_t bytes;
  size_t chunk;
  unsigned steps;
  const char* kernels; /* module image path; NULL: a placeholder (simcuda loads anything) */
  int self_test;
} Options;

static void usage(FILE* out) {
  fprintf(out,
          "Usage: train_demo [--factor F | --bytes SIZE] [--chunk SIZE] [--steps N]\n"
          "                  [--kernels PATH] [--self-test] [--help]\n"
          "\n"
          "A training-like CUDA driver-API job: parameters, activations, gradients and momentum\n"
          "in many cuMemAlloc blocks, updated by SGD with momentum (vs_copy, vs_fill_u32 and\n"
          "vs_axpy_f32 kernels on one stream), then verified element by element on the host.\n"
          "\n"
          "  --factor F      working set = F x the total cuMemGetInfo reports (default 3);\n"
          "                  under vramspill that total is the job's budget\n"
          "  --bytes SIZE    working set of SIZE instead (e.g. 192MiB, 3GiB, 1.5GB)\n"
          "  --chunk SIZE    largest single allocation (default 64MiB)\n"
          "  --steps N       training steps (default 3)\n"
          "  --kernels PATH  module with the vs_* kernels, e.g. build/simcuda/vs_kernels.fatbin;\n"
          "                  needed on a GPU (on simcuda any image loads, so it is optional)\n"
          "  --self-test     after a verified run, change one element on the device and check\n"
          "                  that verification reports it (exit 3 when it does, 1 when not)\n"
          "  -h, --help      show this help\n"
          "\n"
          "Exit status: 0 every element verified; 2 CUDA_ERROR_OUT_OF_MEMORY (the message names\n"
          "the allocation); 3 a verification mismatch (the message names the block and element);\n"
          "1 any other error (the message names the call).\n");
}

/* "123", "64MiB", "1.5GiB", "2GB": binary K/M/G/T(iB), decimal KB/MB/GB/TB. 0 when malformed. */
static size_t parse_size(const char* text) {
  static const struct {
    const char* suffix;
    double scale;
  } units[] = {{"", 1},      {"B", 1},          {"K", 0x1p10},  {"KiB", 0x1p10},
               {"M", 0x1p20}, {"MiB", 0x1p20},   {"G", 0x1p30},  {"GiB", 0x1p30},
               {"T", 0x1p40}, {"TiB", 0x1p40},   {"KB", 1e3},    {"MB", 1e6},
               {"GB", 1e9},   {"TB", 1e12}};
  char* end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (end == text || errno != 0 || !(value > 0)) return 0;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; ++i) {
    if (strcmp(end, units[i].suffix) != 0) continue;
    double bytes = value * units[i].scale;
    return bytes < 0x1p62 ? (size_t)bytes : 0;
  }
  return 0;
}

/* Formats bytes as "768.0 MiB" into buf (at least 32 bytes); returns buf. */
static const char* format_size(size_t bytes, char* buf) {
  static const char* const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  int u = 0;
  while (value >= 1024 && u < 4) {
    value /= 1024;
    ++u;
  }
  if (u == 0)
    snprintf(buf, 32, "%zu B", bytes);
  else
    snprintf(buf, 32, "%.1f %s", value, unit[u]);
  return buf;
}

/* Formats a ratio as "3.0x" (or "0.02x" when small) into buf (at least 32 bytes). */
static const char* format_ratio(size_t part, size_t whole, char* buf) {
  double ratio = whole ? (double)part / (double)whole : 0;
  snprintf(buf, 32, ratio >= 0.1 ? "%.1fx" : "%.2gx", ratio);
  return buf;
}

/* Accepts "--name VALUE" and "--name=VALUE"; returns the value or NULL if this is not --name. */
static const char* option_value(int argc, char** argv, int* i, const char* name) {
  size_t length = strlen(name);
  if (strncmp(argv[*i], name, length) != 0) return NULL;
  if (argv[*i][length] == '=') return argv[*i] + length + 1;
  if (argv[*i][length] != '\0') return NULL;
  if (*i + 1 >= argc) {
    fprintf(stderr, "train_demo: %s needs a value\n", name);
    exit(kError);
  }
  return argv[++*i];
}

static void bad_value(const char* name, const char* value, const char* expected) {
  fprintf(stderr, "train_demo: %s '%s': expected %s\n", name, value, expected);
  exit(kError);
}

static Options parse_options(int argc, char** argv) {
  Options o = {3.0, 0, 64 * MiB, 3, NULL, 0};
  for (int i = 1; i < argc; ++i) {
    const char* v;
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      exit(kOk);
    } else if (!strcmp(argv[i], "--self-test")) {
      o.self_test = 1;
    } else if ((v = option_value(argc, argv, &i, "--factor"))) {
      char* end = NULL;
      o.factor = strtod(v, &end);
      if (end == v || *end || !(o.factor > 0) || o.factor > 1e6)
        bad_value("--factor", v, "a positive number");
    } else if ((v = option_value(argc, argv, &i, "--bytes"))) {
      if ((o.bytes = parse_size(v)) < 4 * sizeof(float))
        bad_value("--bytes", v, "a size of at least 16 bytes, e.g. 192MiB");
    } else if ((v = option_value(argc, argv, &i, "--chunk"))) {
      o.chunk = parse_size(v);
      if (o.chunk < 4096 || o.chunk % sizeof(float) != 0)
        bad_value("--chunk", v, "a size of at least 4KiB, a multiple of 4 bytes");
    } else if ((v = option_value(argc, argv, &i, "--steps"))) {
      char* end = NULL;
      unsigned long steps = strtoul(v, &end, 10);
      if (end == v || *end || steps < 1 || steps > 1000000)
        bad_value("--steps", v, "a whole number from 1 to 1000000");
      o.steps = (unsigned)steps;
    } else if ((v = option_value(argc, argv, &i, "--kernels"))) {
      o.kernels = v;
    } else {
      fprintf(stderr, "train_demo: unknown argument '%s'\n\n", argv[i]);
      usage(stderr);
      exit(kError);
    }
  }
  return o;
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */

static const char* error_name(CUresult result) {
  const char* name = NULL;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS ? name : "unknown CUresult";
}

/* 0 on success; otherwise prints "CALL (WHAT) failed: ERROR" and returns the exit status. */
static int check(CUresult result, const char* call, const char* what) {
  if (result == CUDA_SUCCESS) return kOk;
  fprintf(stderr, "train_demo: %s%s%s%s failed: %s\n", call, what ? "(" : "", what ? what : "",
          what ? ")" : "", error_name(result));
  return result == CUDA_ERROR_OUT_OF_MEMORY ? kOutOfMemory : kError;
}

/* ------------------------------------------------------------------------------------------ */
/* The model: blocks, kernels, the host reference                                             */

typedef struct {
  CUdeviceptr ptr;
  size_t count; /* floats */
} Block;

typedef struct {
  size_t layers;
  size_t chunk_count;   /* floats in a full block; the last layer may hold fewer */
  size_t total_bytes;   /* the whole working set, all four roles */
  Block* blocks;        /* [layers * kRoles], layer-major */
  CUdevice device;
  CUcontext context;    /* the retained primary context; NULL until retained */
  CUmodule module;
  CUstream stream;
  CUfunction fill, copy, axpy;
  uint32_t expected[kPeriod][kRoles]; /* final bit patterns, by initial parameter value */
} Model;

static Block* block_at(Model* m, size_t layer, int role) { return &m->blocks[layer * kRoles + role]; }

/* Index into the parameter pattern of element i of layer k. */
static size_t pattern_index(size_t layer, size_t i) {
  return (i + kLayerShift * layer) % kPeriod;
}

static uint32_t bits_of(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}
static float float_of(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* y = a*x + y rounded like vs_axpy_f32: the product, then the sum. */
static float axpy(float a, float x, float y) {
  volatile float product = a * x;
  return product + y;
}

/* The host reference: what every element must hold after `steps` steps, for each initial value. */
static void compute_expected(Model* m, unsigned steps) {
  for (unsigned v = 0; v < kPeriod; ++v) {
    float p = (float)(v + 1), a = float_of(kPoison), g = float_of(kPoison), mom = 0.0f;
    for (unsigned s = 0; s < steps; ++s) {
      a = p;
      a = axpy(1.0f, p, a);
      g = 0.0f;
      g = axpy(0.25f, a, g);
      mom = axpy(-kMomentumDecay, mom, mom);
      mom = axpy(1.0f, g, mom);
      p = axpy(-kLearningRate, mom, p);
    }
    m->expected[v][kParams] = bits_of(p);
    m->expected[v][kActs] = bits_of(a);
    m->expected[v][kGrads] = bits_of(g);
    m->expected[v][kMomentum] = bits_of(mom);
  }
}

/* Grid-stride kernels: any grid covers the range; this one keeps launches modest. */
static unsigned grid_for(size_t items) {
  size_t blocks = (items + 255) / 256;
  return (unsigned)(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

static int launch(Model* m, CUfunction f, const char* name, size_t items, void** params,
                  size_t layer, int role) {
  char what[96];
  CUresult r = cuLaunchKernel(f, grid_for(items), 1, 1, 256, 1, 1, 0, m->stream, params, NULL);
  if (r == CUDA_SUCCESS) return kOk;
  snprintf(what, sizeof what, "%s on %s block %zu of %zu", name, kRoleName[role], layer + 1,
           m->layers);
  return check(r, "cuLaunchKernel", what);
}

static int fill(Model* m, size_t layer, int role, uint32_t value) {
  Block* b = block_at(m, layer, role);
  uint64_t count = b->count;
  void* params[] = {&b->ptr, &value, &count};
  return launch(m, m->fill, "vs_fill_u32", b->count, params, layer, role);
}

static int copy(Model* m, size_t layer, int to, int from) {
  Block* dst = block_at(m, layer, to);
  Block* src = block_at(m, layer, from);
  uint64_t bytes = dst->count * sizeof(float);
  void* params[] = {&dst->ptr, &src->ptr, &bytes};
  return launch(m, m->copy, "vs_copy", bytes, params, layer, to);
}

/* role y += a * role x */
static int axpy_launch(Model* m, size_t layer, int y, float a, int x) {
  Block* by = block_at(m, layer, y);
  Block* bx = block_at(m, layer, x);
  uint64_t n = by->count;
  void* params[] = {&by->ptr, &bx->ptr, &a, &n};
  return launch(m, m->axpy, "vs_axpy_f32", by->count, params, layer, y);
}

/* ------------------------------------------------------------------------------------------ */
/* Phases                                                                                      */

static int load_kernels(Model* m, const char* image) {
  CUresult r = image ? cuModuleLoad(&m->module, image)
                     : cuModuleLoadData(&m->module, "placeholder: simcuda accepts any image");
  if (r != CUDA_SUCCESS) {
    m->module = NULL;
    int status = check(r, image ? "cuModuleLoad" : "cuModuleLoadData", image);
    if (!image)
      fprintf(stderr, "train_demo: on a GPU, pass --kernels with the nvcc-built "
                      "vs_kernels.fatbin (build/simcuda/vs_kernels.fatbin)\n");
    return status;
  }
  int status = check(cuModuleGetFunction(&m->fill, m->module, "vs_fill_u32"),
                     "cuModuleGetFunction", "vs_fill_u32");
  if (!status) status = check(cuModuleGetFunction(&m->copy, m->module, "vs_copy"),
                              "cuModuleGetFunction", "vs_copy");
  if (!status) status = check(cuModuleGetFunction(&m->axpy, m->module, "vs_axpy_f32"),
                              "cuModuleGetFunction", "vs_axpy_f32");
  return status;
}

/* Splits the working set into layers of four equal tensors of at most `chunk` bytes each. */
static int plan(Model* m, size_t working_set, size_t chunk) {
  size_t per_role = working_set / kRoles / sizeof(float); /* floats */
  if (per_role == 0) {
    fprintf(stderr, "train_demo: a working set of %zu bytes is too small\n", working_set);
    return kError;
  }
  m->chunk_count = chunk / sizeof(float);
  m->layers = (per_role + m->chunk_count - 1) / m->chunk_count;
  m->blocks = calloc(m->layers * kRoles, sizeof(Block));
  if (!m->blocks) {
    fprintf(stderr, "train_demo: no host memory for %zu block records\n", m->layers * kRoles);
    return kError;
  }
  for (size_t k = 0; k < m->layers; ++k) {
    size_t count = k + 1 < m->layers ? m->chunk_count : per_role - k * m->chunk_count;
    for (int r = 0; r < kRoles; ++r) block_at(m, k, r)->count = count;
  }
  m->total_bytes = per_role * sizeof(float) * kRoles;
  return kOk;
}

static int allocate(Model* m) {
  size_t held = 0, blocks = 0;
  char a[32], b[32];
  for (int r = 0; r < kRoles; ++r) {
    for (size_t k = 0; k < m->layers; ++k, ++blocks) {
      Block* block = block_at(m, k, r);
      size_t bytes = block->count * sizeof(float);
      CUresult result = cuMemAlloc(&block->ptr, bytes);
      if (result != CUDA_SUCCESS) {
        block->ptr = 0;
        fprintf(stderr, "train_demo: cuMemAlloc(%s) for %s block %zu of %zu failed: %s, "
                        "after %s in %zu blocks\n",
                format_size(bytes, a), kRoleName[r], k + 1, m->layers, error_name(result),
                format_size(held, b), blocks);
        return result == CUDA_ERROR_OUT_OF_MEMORY ? kOutOfMemory : kError;
      }
      held += bytes;
    }
  }
  return kOk;
}

enum { kDevice, kManaged, kHost, kUnknown, kPlaces };

typedef CUresult (*RetainFunction)(CUmemGenericAllocationHandle*, void*);

/* The driver's own cuMemRetainAllocationHandle. vramspill refuses it for a tiered block, as the
 * driver does for any cuMemAlloc memory: a program holding one of its granules' handles would
 * keep memory that a move leaves. This demo only looks where each granule is and lets go at
 * once, so it asks the loaded driver past the shim (libc's own dlsym, which vramspill does not
 * see), as vramspill's tests check its honesty; without vramspill that is the same function. */
static RetainFunction driver_retain(void) {
  typedef void* (*Dlsym)(void*, const char*);
  static RetainFunction found;
  if (found != NULL) return found;
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  Dlsym libc_dlsym = NULL;
  if (libc != NULL) {
    /* The versions dlsym has had: since glibc 2.34, and before it on x86-64 and on aarch64. */
    static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof kVersions / sizeof kVersions[0] && libc_dlsym == NULL; ++i)
      libc_dlsym = (Dlsym)dlvsym(libc, "dlsym", kVersions[i]);
  }
  if (libc_dlsym != NULL && driver != NULL)
    found = (RetainFunction)libc_dlsym(driver, "cuMemRetainAllocationHandle");
  if (found == NULL) found = cuMemRetainAllocationHandle;
  return found;
}

/* Adds a VMM block's bytes to `bytes` by where its memory is, 2 MiB at a time: the handle mapped
 * at each address says (cuPointerGetAttribute says device memory for any VMM memory, wherever its
 * pages are; vramspill's tiered blocks are VMM memory). 0 if `ptr` is not VMM memory. */
static int add_vmm_placement(CUdeviceptr ptr, size_t size, size_t bytes[kPlaces]) {
  const RetainFunction retain = driver_retain();
  const size_t step = (size_t)2 << 20;
  for (size_t offset = 0; offset < size; offset += step) {
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    int place = kUnknown;
    if (retain(&handle, (void*)(uintptr_t)(ptr + offset)) != CUDA_SUCCESS) {
      if (offset == 0) return 0;
    } else {
      if (cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS)
        place = prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? kDevice : kHost;
      cuMemRelease(handle);
    }
    bytes[place] += size - offset < step ? size - offset : step;
  }
  return 1;
}

/* Where each block landed, as the driver tells it (vramspill must tell the truth). */
static void report_placement(Model* m) {
  static const char* const place_name[kPlaces] = {"device", "managed", "host", "unknown"};
  size_t bytes[kRoles][kPlaces] = {{0}}, total[kPlaces] = {0};
  char s[32];
  for (int r = 0; r < kRoles; ++r) {
    for (size_t k = 0; k < m->layers; ++k) {
      Block* b = block_at(m, k, r);
      const size_t size = b->count * sizeof(float);
      size_t here[kPlaces] = {0};
      if (!add_vmm_placement(b->ptr, size, here)) {
        unsigned int type = 0, managed = 0;
        int place = kUnknown;
        if (cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, b->ptr) ==
                CUDA_SUCCESS &&
            cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b->ptr) ==
                CUDA_SUCCESS)
          place = managed ? kManaged
                  : type == CU_MEMORYTYPE_DEVICE ? kDevice
                  : type == CU_MEMORYTYPE_HOST   ? kHost
                                                 : kUnknown;
        here[place] = size;
      }
      for (int p = 0; p < kPlaces; ++p) {
        bytes[r][p] += here[p];
        total[p] += here[p];
      }
    }
  }
  if (total[kDevice] == m->total_bytes) {
    printf("train_demo: placement (the driver's pointer attributes and VMM handles): all %zu "
           "blocks in device memory\n",
           m->layers * kRoles);
    return;
  }
  printf("train_demo: placement (the driver's pointer attributes and VMM handles):");
  for (int p = 0; p < kPlaces; ++p)
    if (total[p]) printf(" %s %s;", place_name[p], format_size(total[p], s));
  printf("\n");
  for (int r = 0; r < kRoles; ++r) {
    printf("  %-11s", kRoleName[r]);
    for (int p = 0; p < kPlaces; ++p)
      if (bytes[r][p]) printf(" %s %s", format_size(bytes[r][p], s), place_name[p]);
    printf("\n");
  }
}

/* Parameters from the host pattern; momentum 0; gradients and activations poisoned. */
static int initialise(Model* m, float* host) {
  for (size_t j = 0; j < m->chunk_count + kPeriod; ++j) host[j] = (float)(j % kPeriod + 1);
  int status = kOk;
  for (size_t k = 0; k < m->layers && !status; ++k) {
    Block* p = block_at(m, k, kParams);
    char what[64];
    snprintf(what, sizeof what, "parameters block %zu of %zu", k + 1, m->layers);
    status = check(cuMemcpyHtoD(p->ptr, host + pattern_index(k, 0), p->count * sizeof(float)),
                   "cuMemcpyHtoD", what);
    if (!status) status = fill(m, k, kMomentum, 0);
    if (!status) status = fill(m, k, kGrads, kPoison);
    if (!status) status = fill(m, k, kActs, kPoison);
  }
  return status;
}

static int step_layer(Model* m, size_t k) {
  int s = copy(m, k, kActs, kParams);                                 /* forward */
  if (!s) s = axpy_launch(m, k, kActs, 1.0f, kParams);
  if (!s) s = fill(m, k, kGrads, 0);                                  /* backward */
  if (!s) s = axpy_launch(m, k, kGrads, 0.25f, kActs);
  if (!s) s = axpy_launch(m, k, kMomentum, -kMomentumDecay, kMomentum); /* update */
  if (!s) s = axpy_launch(m, k, kMomentum, 1.0f, kGrads);
  if (!s) s = axpy_launch(m, k, kParams, -kLearningRate, kMomentum);
  return s;
}
enum { kLaunchesPerLayer = 7 };

static int train(Model* m, unsigned steps, int simulated) {
  CUevent start = NULL, stop = NULL;
  char s[32];
  int status = check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate", NULL);
  if (!status) status = check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate", NULL);
  for (unsigned step = 1; step <= steps && !status; ++step) {
    status = check(cuEventRecord(start, m->stream), "cuEventRecord", NULL);
    for (size_t k = 0; k < m->layers && !status; ++k) status = step_layer(m, k);
    if (!status) status = check(cuEventRecord(stop, m->stream), "cuEventRecord", NULL);
    if (!status) status = check(cuStreamSynchronize(m->stream), "cuStreamSynchronize", NULL);
    float ms = 0;
    if (!status) status = check(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime", NULL);
    if (!status)
      printf("step %u/%u: %zu kernel launches over %zu layer(s) (%s), %.3f ms on the stream (%s)\n",
             step, steps, m->layers * kLaunchesPerLayer, m->layers,
             format_size(m->total_bytes, s), ms,
             simulated ? "modeled by simcuda" : "measured by CUDA events");
  }
  if (start) cuEventDestroy(start);
  if (stop) cuEventDestroy(stop);
  return status;
}

/* Copies every block back and compares each element's bits with the host reference. */
static int verify(Model* m, float* host) {
  char what[64];
  for (int r = 0; r < kRoles; ++r) {
    for (size_t k = 0; k < m->layers; ++k) {
      Block* b = block_at(m, k, r);
      snprintf(what, sizeof what, "%s block %zu of %zu", kRoleName[r], k + 1, m->layers);
      int status = check(cuMemcpyDtoH(host, b->ptr, b->count * sizeof(float)), "cuMemcpyDtoH",
                         what);
      if (status) return status;
      const uint32_t* got = (const uint32_t*)host;
      size_t v = pattern_index(k, 0);
      for (size_t i = 0; i < b->count; ++i, v = v + 1 == kPeriod ? 0 : v + 1) {
        uint32_t want = m->expected[v][r];
        if (got[i] == want) continue;
        fprintf(stderr,
                "train_demo: verification FAILED: %s element %zu holds 0x%08x (%g), "
                "expected 0x%08x (%g)\n",
                what, i, got[i], (double)float_of(got[i]), want, (double)float_of(want));
        return kMismatch;
      }
    }
  }
  return kOk;
}

/* Changes the last element of the last block verified by one bit, as a fault would. */
static int corrupt_one_element(Model* m) {
  Block* b = block_at(m, m->layers - 1, kRoles - 1);
  size_t i = b->count - 1;
  uint32_t bits = m->expected[pattern_index(m->layers - 1, i)][kRoles - 1] ^ 1u;
  printf("train_demo: self-test: flipping one bit of %s block %zu of %zu, element %zu; "
         "verification must report it\n",
         kRoleName[kRoles - 1], m->layers, m->layers, i);
  return check(cuMemcpyHtoD(b->ptr + i * sizeof(float), &bits, sizeof bits), "cuMemcpyHtoD",
               "self-test");
}

static void release(Model* m) {
  for (size_t i = 0; m->blocks && i < m->layers * kRoles; ++i)
    if (m->blocks[i].ptr) cuMemFree(m->blocks[i].ptr);
  free(m->blocks);
  m->blocks = NULL;
  if (m->stream) cuStreamDestroy(m->stream);
  if (m->module) cuModuleUnload(m->module);
  if (m->context) cuDevicePrimaryCtxRelease(m->device);
}

/* ------------------------------------------------------------------------------------------ */

static int run(const Options* o, Model* m, float** host) {
  char name[128] = "", a[32], b[32], c[32], r[32];
  size_t free_bytes = 0, total = 0;
  int status = check(cuInit(0), "cuInit", NULL);
  if (!status) status = check(cuDeviceGet(&m->device, 0), "cuDeviceGet", NULL);
  if (!status)
    status = check(cuDevicePrimaryCtxRetain(&m->context, m->device), "cuDevicePrimaryCtxRetain",
                   NULL);
  if (!status) status = check(cuCtxSetCurrent(m->context), "cuCtxSetCurrent", NULL);
  if (!status)
    status = check(cuDeviceGetName(name, sizeof name, m->device), "cuDeviceGetName", NULL);
  if (!status) status = check(cuMemGetInfo(&free_bytes, &total), "cuMemGetInfo", NULL);
  if (status) return status;
  int simulated = strncmp(name, "simcuda", 7) == 0;
  printf("train_demo: device 0: %s; cuMemGetInfo: %s total, %s free\n", name,
         format_size(total, a), format_size(free_bytes, b));

  size_t working_set = o->bytes ? o->bytes : (size_t)fmin(o->factor * (double)total, 0x1p62);
  if ((status = plan(m, working_set, o->chunk))) return status;
  printf("train_demo: working set %s (%s the %s total): %zu layer(s) x (parameters, "
         "activations, gradients, momentum) in blocks of up to %s\n",
         format_size(m->total_bytes, a), format_ratio(m->total_bytes, total, r),
         format_size(total, b), m->layers, format_size(m->chunk_count * sizeof(float), c));

  if ((status = load_kernels(m, o->kernels))) return status;
  if ((status = check(cuStreamCreate(&m->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", NULL)))
    return status;
  if ((status = allocate(m))) return status;
  report_placement(m);

  /* The one host buffer: a block's worth of floats (+ the pattern's period for the shift). */
  *host = malloc((m->chunk_count + kPeriod) * sizeof(float));
  if (!*host) {
    fprintf(stderr, "train_demo: no host memory for a %s staging buffer\n",
            format_size(m->chunk_count * sizeof(float), a));
    return kError;
  }
  compute_expected(m, o->steps);
  if ((status = initialise(m, *host))) return status;
  if ((status = train(m, o->steps, simulated))) return status;
  if ((status = verify(m, *host))) return status;
  printf("train_demo: every element of all %zu blocks matches the host's reference\n",
         m->layers * kRoles);
  if (o->self_test) {
    if ((status = corrupt_one_element(m))) return status;
    status = verify(m, *host);
    if (status == kOk) {
      fprintf(stderr, "train_demo: self-test FAILED: verification missed the changed element\n");
      return kError;
    }
    return status;
  }
  printf("train_demo: %u steps over %s (%s the %s reported by cuMemGetInfo) verified\n",
         o->steps, format_size(m->total_bytes, a), format_ratio(m->total_bytes, total, r),
         format_size(total, b));
  return kOk;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* keep stdout and stderr in order when piped */
  Options options = parse_options(argc, argv);
  Model model;
  float* host = NULL;
  memset(&model, 0, sizeof model);
  int status = run(&options, &model, &host);
  if (status == kOutOfMemory)
    printf("train_demo: stopped: out of device memory (a training job dies here)\n");
  release(&model);
  free(host);
  return status;
}
