/*
 * A tour of the CUDA driver API subset simcuda implements, as an ordinary C program: compiled
 * against the toolkit's cuda.h, linked to the toolkit's stub libcuda.so, it runs unchanged on a
 * GPU and on simcuda (LD_LIBRARY_PATH=build/simcuda). Each section prints what it did and checks
 * the result; the exit status is the number of failed checks.
 *
 * Usage: driver_tour [KERNEL_IMAGE]   (a cubin/fatbin holding the vs_* kernels; on simcuda any
 *                                      image loads, so the default is a placeholder)
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static const char* error_name(CUresult result) {
  const char* name = NULL;
  return cuGetErrorName(result, &name) == CUDA_SUCCESS ? name : "unknown CUresult";
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    CUresult check_result_ = (call);                                                  \
    if (check_result_ != CUDA_SUCCESS) {                                              \
      printf("  FAILED %s -> %s (line %d)\n", #call, error_name(check_result_), __LINE__); \
      ++failures;                                                                     \
    }                                                                                 \
  } while (0)

#define EXPECT(condition, ...)                                    \
  do {                                                            \
    if (!(condition)) {                                           \
      printf("  FAILED %s (line %d): ", #condition, __LINE__);    \
      printf(__VA_ARGS__);                                        \
      printf("\n");                                               \
      ++failures;                                                 \
    }                                                             \
  } while (0)

#define MiB ((size_t)1 << 20)

static void entry_points(void) {
  int version = 0;
  void* pfn = NULL;
  CUdriverProcAddressQueryResult found;
  printf("[entry] driver version, cuGetProcAddress\n");
  CHECK(cuDriverGetVersion(&version));
  CHECK(cuGetProcAddress("cuMemAlloc", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT(pfn != NULL && found == CU_GET_PROC_ADDRESS_SUCCESS, "cuMemAlloc not found");
  /* A function the driver lacks, or has only in newer ABIs, is an answer, not an error:
   * CUDA_SUCCESS, a null pointer, and the reason in the status (as an H200 answers). */
  CHECK(cuGetProcAddress("cuNoSuchFunction", &pfn, 12000, 0, &found));
  EXPECT(pfn == NULL && found == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
         "an unknown name gives a null pointer and SYMBOL_NOT_FOUND (status %d)", (int)found);
  pfn = &version;
  CHECK(cuGetProcAddress("cuStreamGetDevice", &pfn, 12000, 0, &found));
  EXPECT(pfn == NULL && found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
         "a function newer than the version asked gives a null pointer and "
         "VERSION_NOT_SUFFICIENT (status %d)",
         (int)found);
  printf("  driver version %d; cuMemAlloc@12000 resolves, unknown and too new names do not\n",
         version);
}

static void devices_and_contexts(CUdevice* device, CUcontext* context) {
  int count = 0, managed = 0, vmm = 0, pools = 0;
  char name[128];
  CUuuid uuid;
  size_t total = 0;
  printf("[devices] count, name, uuid, memory, attributes, contexts\n");
  CHECK(cuDeviceGetCount(&count));
  CHECK(cuDeviceGet(device, 0));
  CHECK(cuDeviceGetName(name, sizeof name, *device));
  CHECK(cuDeviceGetUuid(&uuid, *device));
  CHECK(cuDeviceTotalMem(&total, *device));
  CHECK(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, *device));
  CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                             *device));
  CHECK(cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, *device));
  CHECK(cuDevicePrimaryCtxRetain(context, *device));
  CHECK(cuCtxSetCurrent(*context));
  CUcontext created = NULL, popped = NULL;
  CHECK(cuCtxCreate(&created, NULL, 0, *device));
  CHECK(cuCtxPopCurrent(&popped));
  EXPECT(popped == created, "the created context was current");
  CHECK(cuCtxDestroy(created));
  printf("  %d device(s); %s, %zu MiB; concurrent managed %d, VMM %d, pools %d\n", count, name,
         total / MiB, managed, vmm, pools);
}

static void memory(void) {
  CUdeviceptr linear = 0, pitched = 0;
  size_t pitch = 0, free_before = 0, free_after = 0, total = 0;
  printf("[memory] linear, pitched, info, pinned host, pointer attributes\n");
  CHECK(cuMemGetInfo(&free_before, &total));
  CHECK(cuMemAlloc(&linear, 8 * MiB));
  CHECK(cuMemAllocPitch(&pitched, &pitch, 1000, 64, 4));
  CHECK(cuMemGetInfo(&free_after, &total));
  EXPECT(free_after < free_before, "allocations show in cuMemGetInfo");
  void* pinned = NULL;
  CHECK(cuMemHostAlloc(&pinned, 1 * MiB, CU_MEMHOSTALLOC_DEVICEMAP));
  unsigned int type = 0;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, linear));
  EXPECT(type == CU_MEMORYTYPE_DEVICE, "device memory is DEVICE (got %u)", type);
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)pinned));
  EXPECT(type == CU_MEMORYTYPE_HOST, "pinned memory is HOST (got %u)", type);
  printf("  free %zu -> %zu MiB, pitch %zu\n", free_before / MiB, free_after / MiB, pitch);
  CHECK(cuMemFreeHost(pinned));
  CHECK(cuMemFree(pitched));
  CHECK(cuMemFree(linear));
}

static void copies_streams_events(void) {
  enum { kWords = 1 << 20 };
  static uint32_t host[kWords];
  CUdeviceptr a = 0, b = 0;
  CUstream stream = NULL;
  CUevent start = NULL, stop = NULL;
  float ms = 0;
  printf("[copies] memset, HtoD, DtoD, DtoH on a stream, timed by events (modeled on simcuda)\n");
  for (uint32_t i = 0; i < kWords; ++i) host[i] = i * 2654435761u;
  CHECK(cuMemAlloc(&a, sizeof host));
  CHECK(cuMemAlloc(&b, sizeof host));
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  CHECK(cuEventRecord(start, stream));
  CHECK(cuMemsetD32Async(b, 0xdeadbeefu, kWords, stream));
  CHECK(cuMemcpyHtoDAsync(a, host, sizeof host, stream));
  CHECK(cuMemcpyDtoDAsync(b, a, sizeof host, stream));
  CHECK(cuEventRecord(stop, stream));
  CHECK(cuStreamSynchronize(stream));
  memset(host, 0, sizeof host);
  CHECK(cuMemcpyDtoH(host, b, sizeof host));
  int intact = 1;
  for (uint32_t i = 0; i < kWords; ++i) intact &= host[i] == i * 2654435761u;
  EXPECT(intact, "4 MiB survived HtoD, DtoD, DtoH byte for byte");
  CHECK(cuEventElapsedTime(&ms, start, stop));
  printf("  4 MiB round trip intact: %s; stream time %.3f ms\n", intact ? "yes" : "no", ms);
  CHECK(cuEventDestroy(start));
  CHECK(cuEventDestroy(stop));
  CHECK(cuStreamDestroy(stream));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
}

static void kernels(const char* image_path) {
  enum { kCount = 4096 };
  static float x[kCount], y[kCount];
  CUmodule module = NULL;
  CUfunction axpy = NULL;
  CUdeviceptr dx = 0, dy = 0;
  printf("[kernels] module, function, parameter info, launch of vs_axpy_f32\n");
  CUresult loaded = image_path ? cuModuleLoad(&module, image_path)
                               : cuModuleLoadData(&module, "simcuda accepts any image");
  CHECK(loaded);
  if (loaded != CUDA_SUCCESS) return;
  CHECK(cuModuleGetFunction(&axpy, module, "vs_axpy_f32"));
  size_t offset = 0, size = 0;
  CHECK(cuFuncGetParamInfo(axpy, 2, &offset, &size));
  EXPECT(offset == 16 && size == 4, "parameter a is a float at offset 16 (got %zu, %zu)", offset,
         size);
  for (int i = 0; i < kCount; ++i) {
    x[i] = (float)i;
    y[i] = 1.0f;
  }
  CHECK(cuMemAlloc(&dx, sizeof x));
  CHECK(cuMemAlloc(&dy, sizeof y));
  CHECK(cuMemcpyHtoD(dx, x, sizeof x));
  CHECK(cuMemcpyHtoD(dy, y, sizeof y));
  float a = 2.0f;
  uint64_t n = kCount;
  void* params[] = {&dy, &dx, &a, &n};
  CHECK(cuLaunchKernel(axpy, (kCount + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
  CHECK(cuMemcpyDtoH(y, dy, sizeof y));
  int right = 1;
  for (int i = 0; i < kCount; ++i) right &= y[i] == 2.0f * (float)i + 1.0f;
  EXPECT(right, "y = 2x + 1 for every element");
  printf("  vs_axpy_f32 over %d floats: %s\n", kCount, right ? "correct" : "WRONG");
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  CHECK(cuModuleUnload(module));
}

static void managed_vmm_pools(CUdevice device) {
  printf("[managed, VMM, pools] managed advice + prefetch, VMM aliasing, stream-ordered pool\n");
  CUdeviceptr managed = 0;
  CHECK(cuMemAllocManaged(&managed, 4 * MiB, CU_MEM_ATTACH_GLOBAL));
  memset((void*)managed, 0x3c, 4 * MiB);  /* managed memory is host-accessible */
  CUmemLocation on_device = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  CHECK(cuMemAdvise(managed, 4 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device));
  CHECK(cuMemPrefetchAsync(managed, 4 * MiB, on_device, 0, NULL));
  CHECK(cuCtxSynchronize());
  EXPECT(((unsigned char*)managed)[12345] == 0x3c, "managed bytes survive the migrations");
  CHECK(cuMemFree(managed));

  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = on_device;
  size_t granularity = 0;
  CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr first = 0, second = 0;
  CHECK(cuMemCreate(&handle, granularity, &prop, 0));
  CHECK(cuMemAddressReserve(&first, 2 * granularity, granularity, 0, 0));
  second = first + granularity;
  CHECK(cuMemMap(first, granularity, 0, handle, 0));
  CHECK(cuMemMap(second, granularity, 0, handle, 0));
  CUmemAccessDesc access = {on_device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHECK(cuMemSetAccess(first, 2 * granularity, &access, 1));
  CHECK(cuMemsetD32(first, 0xa11a5u, granularity / 4));
  uint32_t word = 0;
  CHECK(cuMemcpyDtoH(&word, second + 64, sizeof word));
  EXPECT(word == 0xa11a5u, "both mappings show the same bytes (got %x)", word);
  printf("  granularity %zu MiB; aliasing %s\n", granularity / MiB,
         word == 0xa11a5u ? "works" : "BROKEN");
  CHECK(cuMemUnmap(first, 2 * granularity));
  CHECK(cuMemRelease(handle));
  CHECK(cuMemAddressFree(first, 2 * granularity));

  CUmemoryPool pool = NULL;
  CUdeviceptr block = 0;
  cuuint64_t reserved = 0;
  CHECK(cuDeviceGetDefaultMemPool(&pool, device));
  CHECK(cuMemAllocAsync(&block, 3 * MiB, NULL));
  CHECK(cuMemFreeAsync(block, NULL));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &reserved));
  EXPECT(reserved >= 3 * MiB, "the pool reserved what it handed out (%llu)",
         (unsigned long long)reserved);
  printf("  pool reserved high-water mark %llu MiB\n", (unsigned long long)(reserved / MiB));
}

int main(int argc, char** argv) {
  CUdevice device = 0;
  CUcontext context = NULL;
  CHECK(cuInit(0));
  entry_points();
  devices_and_contexts(&device, &context);
  memory();
  copies_streams_events();
  kernels(argc > 1 ? argv[1] : NULL);
  managed_vmm_pools(device);
  CHECK(cuDevicePrimaryCtxRelease(device));
  printf("%s: %d failed check(s)\n", failures == 0 ? "tour passed" : "tour FAILED", failures);
  return failures;
}
