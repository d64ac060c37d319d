// The fault matrix's program (README.md in this folder): a driver-API program that takes device
// memory by every route the shim hooks, under the shim's budget on simcuda, goes past the budget
// (spilled, or refused with spilling off), checks every byte it wrote, frees everything and then
// checks that the budget is whole again. fault_matrix_test.cpp runs it once per cell, with
// SIMCUDA_FAIL failing one call of one driver function.
//
// Environment (fault_matrix_test.cpp sets it):
//   FAULTS_SPILL      auto, host or off: the [spill] mode the shim runs with, which decides the
//                     clean answer of each call past the budget
//   FAULTS_BUDGET_MIB the shim's device budget
//   FAULTS_FUNCTION   the injected function as SIMCUDA_FAIL names it (an export name or a base
//                     name), and FAULTS_RESULT its CUresult; both unset for a clean run
//
// Every driver call the program makes has a clean answer: what it returns without a fault. A call
// that answers otherwise prints one line on standard output and is made again, and the second
// answer must be the clean one (simcuda fails one call, so the state stays that of a clean run):
//   injected cuMemAlloc_v2 = 2                 the injected function itself returned the fault
//   surfaced cuMemAllocAsync = 2 (expected 0)  any other call: a fault inside the shim came out
// At the end it prints "calls: N" and exits 0. A failed check prints "FAILED: ..." and exits 1.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kBlock = 4 * kMiB;
// Bytes written and read back at each end of a block (whole blocks would make every cell slow).
constexpr size_t kChecked = 64 * 1024;
// Larger than a stream-ordered pool's unused reserve (a 32 MiB chunk holding two 4 MiB blocks),
// so that a pool request past the budget cannot be served from the reserve.
constexpr size_t kPoolBlockPastBudget = 32 * kMiB;

[[noreturn]] void fail(const std::string& what) {
  std::printf("FAILED: %s\n", what.c_str());
  std::fflush(stdout);
  std::exit(1);
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// simcuda's rule for which exports a SIMCUDA_FAIL function name matches: the export itself, or
// its base name (without _ptsz/_ptds, then without a trailing _vN).
std::string_view base_name(std::string_view name) {
  for (std::string_view suffix : {"_ptsz", "_ptds"})
    if (name.ends_with(suffix)) name.remove_suffix(suffix.size());
  const size_t version = name.rfind("_v");
  if (version != std::string_view::npos && version + 2 < name.size() &&
      name.find_first_not_of("0123456789", version + 2) == std::string_view::npos)
    name = name.substr(0, version);
  return name;
}

// The calls the program makes, each against its clean answer.
class Calls {
 public:
  Calls()
      : function_(environment("FAULTS_FUNCTION")),
        result_(static_cast<CUresult>(std::atoi(environment("FAULTS_RESULT").c_str()))) {}

  // `call()` is the driver call, named by the export it reaches.
  template <typename Call>
  CUresult make(const char* name, CUresult expected, Call call) {
    ++count_;
    CUresult result = call();
    if (result == expected) return result;
    // A success where the clean run fails would hold something the program does not track
    // (memory past the budget, say): no retry can make that whole.
    if (result == CUDA_SUCCESS)
      fail(std::string(name) + " succeeded where it returns " + std::to_string(expected));
    if (injected(name, result)) {
      std::printf("injected %s = %d\n", name, static_cast<int>(result));
    } else {
      std::printf("surfaced %s = %d (expected %d)\n", name, static_cast<int>(result),
                  static_cast<int>(expected));
    }
    ++count_;
    result = call();
    if (result != expected)
      fail(std::string(name) + " made again returned " + std::to_string(result) + ", not " +
           std::to_string(expected));
    return result;
  }
  template <typename Call>
  void ok(const char* name, Call call) {
    make(name, CUDA_SUCCESS, call);
  }

  int count() const { return count_; }

 private:
  bool injected(std::string_view name, CUresult result) const {
    return !function_.empty() && result == result_ &&
           (name == function_ || base_name(name) == function_);
  }

  std::string function_;
  CUresult result_;
  int count_ = 0;
};

Calls calls;

// cuMemGetInfo of the driver itself, past the shim: what the device really holds. Looked up with
// the C library's dlsym (the shim replaces the exported one) in the loaded libcuda.so.1.
CUresult real_memory_info(size_t* free, size_t* total) {
  using Dlsym = void* (*)(void*, const char*);
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr || driver == nullptr) fail("libc.so.6 or libcuda.so.1 is not loaded");
  auto* libc_dlsym = reinterpret_cast<Dlsym>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
  if (libc_dlsym == nullptr)
    libc_dlsym = reinterpret_cast<Dlsym>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
  const auto memory_info =
      libc_dlsym != nullptr
          ? reinterpret_cast<decltype(&cuMemGetInfo_v2)>(libc_dlsym(driver, "cuMemGetInfo_v2"))
          : nullptr;
  if (memory_info == nullptr) fail("cannot find the driver's own cuMemGetInfo_v2");
  return memory_info(free, total);
}

// A host function that holds its stream until open() (the stream-ordered pool case below).
class Gate {
 public:
  static void CUDA_CB wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    std::unique_lock lock(gate->mutex_);
    gate->changed_.wait(lock, [gate] { return gate->open_; });
  }
  void open() {
    {
      const std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

using LegacyAlloc = CUresult(CUDAAPI*)(unsigned int* dptr, unsigned int bytesize);
using LegacyAllocPitch = CUresult(CUDAAPI*)(unsigned int* dptr, unsigned int* pitch,
                                            unsigned int width, unsigned int height,
                                            unsigned int element_size);
using LegacyFree = CUresult(CUDAAPI*)(unsigned int dptr);
using ProcAddressV1 = CUresult(CUDAAPI*)(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags);

// How a block is given back.
enum class FreeRoute { kFree, kFreeAsync, kFreeAsyncPerThread };

struct Block {
  const char* name;
  CUdeviceptr pointer = 0;
  size_t bytes = 0;
  FreeRoute free_route = FreeRoute::kFree;
};

uint32_t pattern(size_t block, size_t word) {
  return static_cast<uint32_t>(block + 1) * 0x9e3779b9u ^ static_cast<uint32_t>(word * 2654435761u);
}

class Program {
 public:
  Program()
      : spill_(environment("FAULTS_SPILL")),
        budget_(std::strtoull(environment("FAULTS_BUDGET_MIB").c_str(), nullptr, 10) * kMiB) {
    if (spill_ != "auto" && spill_ != "host" && spill_ != "off")
      fail("FAULTS_SPILL must be auto, host or off");
    if (budget_ == 0) fail("FAULTS_BUDGET_MIB is not set");
  }

  void run() {
    set_up();
    within_budget();
    past_budget();
    check_blocks();
    free_everything();
    check_budget_whole();
    tear_down();
    std::printf("calls: %d\n", calls.count());
  }

 private:
  // --- setting up ------------------------------------------------------------------------------

  void set_up() {
    if (cuInit(0) != CUDA_SUCCESS) fail("cuInit");  // the first cuInit is never failed
    calls.ok("cuInit", [] { return cuInit(0); });
    calls.ok("cuDeviceGet", [&] { return cuDeviceGet(&device_, 0); });
    calls.ok("cuDevicePrimaryCtxRetain",
             [&] { return cuDevicePrimaryCtxRetain(&context_, device_); });
    calls.ok("cuCtxSetCurrent", [&] { return cuCtxSetCurrent(context_); });
    calls.ok("cuModuleLoadData",
             [&] { return cuModuleLoadData(&module_, "simcuda accepts any image"); });
    calls.ok("cuModuleGetFunction",
             [&] { return cuModuleGetFunction(&fill_, module_, "vs_fill_u32"); });
    calls.ok("cuStreamCreate", [&] { return cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING); });
    calls.ok("cuStreamCreate", [&] { return cuStreamCreate(&held_, CU_STREAM_NON_BLOCKING); });
    look_up_exports();
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    calls.ok("cuMemPoolCreate", [&] { return cuMemPoolCreate(&pool_, &props); });
    calls.ok("cuDeviceGetDefaultMemPool",
             [&] { return cuDeviceGetDefaultMemPool(&default_pool_, device_); });
    // A block whose free is still pending must not be handed out again (the pool case below).
    int no = 0;
    calls.ok("cuMemPoolSetAttribute", [&] {
      return cuMemPoolSetAttribute(default_pool_, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                                   &no);
    });
    const auto [free, total] = memory_info();
    if (free != budget_ || total != budget_)
      fail("at the start cuMemGetInfo reports " + std::to_string(free) + " of " +
           std::to_string(total) + " bytes free, not the whole budget");
  }

  void* look_up(const char* name, int version, cuuint64_t flags) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult status{};
    calls.ok("cuGetProcAddress_v2",
             [&] { return cuGetProcAddress(name, &function, version, flags, &status); });
    if (function == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS)
      fail(std::string("no ") + name + " at version " + std::to_string(version));
    return function;
  }

  void look_up_exports() {
    constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    alloc_async_ptsz_ =
        reinterpret_cast<decltype(&cuMemAllocAsync)>(look_up("cuMemAllocAsync", 12000, kPerThread));
    alloc_from_pool_ptsz_ = reinterpret_cast<decltype(&cuMemAllocFromPoolAsync)>(
        look_up("cuMemAllocFromPoolAsync", 12000, kPerThread));
    free_async_ptsz_ =
        reinterpret_cast<decltype(&cuMemFreeAsync)>(look_up("cuMemFreeAsync", 12000, kPerThread));
    // The 32-bit ABI, as a program built for CUDA 2.0 finds it.
    legacy_alloc_ = reinterpret_cast<LegacyAlloc>(look_up("cuMemAlloc", 2000, 0));
    legacy_alloc_pitch_ = reinterpret_cast<LegacyAllocPitch>(look_up("cuMemAllocPitch", 2000, 0));
    legacy_free_ = reinterpret_cast<LegacyFree>(look_up("cuMemFree", 2000, 0));
    // The first cuGetProcAddress, which cuda.h no longer names.
    const auto v1 = reinterpret_cast<ProcAddressV1>(dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
    if (v1 == nullptr) fail("no cuGetProcAddress");
    void* function = nullptr;
    calls.ok("cuGetProcAddress", [&] { return v1("cuMemAlloc", &function, 12000, 0); });
  }

  std::pair<size_t, size_t> memory_info() {
    size_t free = 0;
    size_t total = 0;
    calls.ok("cuMemGetInfo_v2", [&] { return cuMemGetInfo(&free, &total); });
    return {free, total};
  }

  // --- allocating ------------------------------------------------------------------------------

  // Past the budget with spilling off a spillable route is refused; otherwise it succeeds.
  CUresult spillable(bool past) const {
    return past && spill_ == "off" ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
  }

  // Allocations by each linear route that spills; `past`: the budget has no room left.
  void linear_routes(bool past) {
    const CUresult expected = spillable(past);
    Block plain{.name = "cuMemAlloc_v2", .bytes = kBlock};
    if (calls.make("cuMemAlloc_v2", expected,
                   [&] { return cuMemAlloc(&plain.pointer, plain.bytes); }) == CUDA_SUCCESS)
      blocks_.push_back(plain);
    Block pitched{.name = "cuMemAllocPitch_v2"};
    size_t pitch = 0;
    constexpr size_t kWidth = 4000;
    constexpr size_t kHeight = 1024;
    if (calls.make("cuMemAllocPitch_v2", expected, [&] {
          return cuMemAllocPitch(&pitched.pointer, &pitch, kWidth, kHeight, 4);
        }) == CUDA_SUCCESS) {
      if (pitch < kWidth) fail("cuMemAllocPitch gave a pitch below the width");
      pitched.bytes = pitch * kHeight;
      blocks_.push_back(pitched);
    }
    Block managed{.name = "cuMemAllocManaged", .bytes = kBlock};
    if (calls.make("cuMemAllocManaged", expected, [&] {
          return cuMemAllocManaged(&managed.pointer, managed.bytes, CU_MEM_ATTACH_GLOBAL);
        }) == CUDA_SUCCESS)
      blocks_.push_back(managed);
  }

  // Stream-ordered allocations from the device's pool and from a created one, plain and
  // per-thread.
  void pool_routes(bool past) {
    const CUresult expected = spillable(past);
    const size_t bytes = past ? kPoolBlockPastBudget : kBlock;
    Block async{.name = "cuMemAllocAsync", .bytes = bytes, .free_route = FreeRoute::kFreeAsync};
    if (calls.make("cuMemAllocAsync", expected,
                   [&] { return cuMemAllocAsync(&async.pointer, bytes, stream_); }) == CUDA_SUCCESS)
      blocks_.push_back(async);
    Block async_ptsz{.name = "cuMemAllocAsync_ptsz",
                     .bytes = bytes,
                     .free_route = FreeRoute::kFreeAsyncPerThread};
    if (calls.make("cuMemAllocAsync_ptsz", expected, [&] {
          return alloc_async_ptsz_(&async_ptsz.pointer, bytes, nullptr);
        }) == CUDA_SUCCESS)
      blocks_.push_back(async_ptsz);
    Block from_pool{
        .name = "cuMemAllocFromPoolAsync", .bytes = bytes, .free_route = FreeRoute::kFreeAsync};
    if (calls.make("cuMemAllocFromPoolAsync", expected, [&] {
          return cuMemAllocFromPoolAsync(&from_pool.pointer, bytes, pool_, stream_);
        }) == CUDA_SUCCESS)
      blocks_.push_back(from_pool);
    Block from_pool_ptsz{.name = "cuMemAllocFromPoolAsync_ptsz",
                         .bytes = bytes,
                         .free_route = FreeRoute::kFreeAsyncPerThread};
    if (calls.make("cuMemAllocFromPoolAsync_ptsz", expected, [&] {
          return alloc_from_pool_ptsz_(&from_pool_ptsz.pointer, bytes, pool_, nullptr);
        }) == CUDA_SUCCESS)
      blocks_.push_back(from_pool_ptsz);
  }

  // A device-located VMM handle. Past the budget, every mode but off makes it host-located (Note
  // [Host-located VMM spills] in shim/placement/vmm_spill.h); off refuses it.
  void vmm_route(bool past) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    CUmemGenericAllocationHandle handle = 0;
    const CUresult expected = past && spill_ == "off" ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (calls.make("cuMemCreate", expected,
                   [&] { return cuMemCreate(&handle, kBlock, &prop, 0); }) == CUDA_SUCCESS)
      map_vmm(handle);
  }

  // Routes that never spill: arrays, mipmapped arrays, the 32-bit ABI (which simcuda always
  // refuses: Note [Legacy allocations have no 32-bit address] there).
  void unspilled_routes(bool past) {
    const CUresult expected = past ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;

    CUDA_ARRAY_DESCRIPTOR flat{};
    flat.Width = past ? 2048 : 256;
    flat.Height = past ? 2048 : 256;
    flat.Format = CU_AD_FORMAT_FLOAT;
    flat.NumChannels = 1;
    CUarray array = nullptr;
    if (calls.make("cuArrayCreate_v2", expected, [&] { return cuArrayCreate(&array, &flat); }) ==
        CUDA_SUCCESS)
      arrays_.push_back(array);
    CUDA_ARRAY3D_DESCRIPTOR cube{};
    cube.Width = past ? 1024 : 64;
    cube.Height = past ? 1024 : 64;
    cube.Depth = 16;
    cube.Format = CU_AD_FORMAT_FLOAT;
    cube.NumChannels = 1;
    if (calls.make("cuArray3DCreate_v2", expected,
                   [&] { return cuArray3DCreate(&array, &cube); }) == CUDA_SUCCESS)
      arrays_.push_back(array);
    CUDA_ARRAY3D_DESCRIPTOR mip{};
    mip.Width = flat.Width;
    mip.Height = flat.Height;
    mip.Format = CU_AD_FORMAT_FLOAT;
    mip.NumChannels = 1;
    CUmipmappedArray mipmapped = nullptr;
    if (calls.make("cuMipmappedArrayCreate", expected,
                   [&] { return cuMipmappedArrayCreate(&mipmapped, &mip, 3); }) == CUDA_SUCCESS)
      mipmapped_.push_back(mipmapped);

    unsigned int legacy = 0;
    unsigned int legacy_pitch = 0;
    calls.make("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY,
               [&] { return legacy_alloc_(&legacy, kBlock); });
    calls.make("cuMemAllocPitch", CUDA_ERROR_OUT_OF_MEMORY,
               [&] { return legacy_alloc_pitch_(&legacy, &legacy_pitch, 4096, 1024, 4); });
  }

  // A VMM handle mapped, made accessible and retained once more (then released), as frameworks'
  // expandable segments do.
  void map_vmm(CUmemGenericAllocationHandle handle) {
    CUdeviceptr address = 0;
    calls.ok("cuMemAddressReserve", [&] { return cuMemAddressReserve(&address, kBlock, 0, 0, 0); });
    calls.ok("cuMemMap", [&] { return cuMemMap(address, kBlock, 0, handle, 0); });
    CUmemAccessDesc access{};
    access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device_};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    calls.ok("cuMemSetAccess", [&] { return cuMemSetAccess(address, kBlock, &access, 1); });
    CUmemGenericAllocationHandle retained = 0;
    calls.ok("cuMemRetainAllocationHandle", [&] {
      return cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(address));
    });
    calls.ok("cuMemRelease", [&] { return cuMemRelease(retained); });
    vmm_.push_back(VmmMapping{.handle = handle, .address = address});
    blocks_.push_back(Block{.name = "VMM mapping", .pointer = address, .bytes = kBlock});
  }

  // The program's own page-locked memory: allocated, registered, and used as copy sources.
  void host_memory() {
    calls.ok("cuMemHostAlloc",
             [&] { return cuMemHostAlloc(&pinned_, kChecked, CU_MEMHOSTALLOC_PORTABLE); });
    calls.ok("cuMemAllocHost_v2", [&] { return cuMemAllocHost(&allocated_host_, kChecked); });
    registered_ = std::aligned_alloc(4096, kChecked);
    if (registered_ == nullptr) fail("aligned_alloc");
    calls.ok("cuMemHostRegister_v2", [&] { return cuMemHostRegister(registered_, kChecked, 0); });
  }

  void within_budget() {
    // Most of the budget in one block, so that what follows fits and then the budget is full.
    filler_ = Block{.name = "filler", .bytes = budget_ / 2};
    calls.ok("cuMemAlloc_v2", [&] { return cuMemAlloc(&filler_.pointer, filler_.bytes); });
    linear_routes(/*past=*/false);
    pool_routes(/*past=*/false);
    vmm_route(/*past=*/false);
    unspilled_routes(/*past=*/false);
    host_memory();
    write_blocks();
    launch_kernel();
    query_pointers(blocks_.front());
    share(blocks_.front());
    // What is left of the budget, but a megabyte: nothing of 4 MiB fits any more.
    const auto [free, total] = memory_info();
    if (total != budget_ || free <= kMiB)
      fail("before the last filler cuMemGetInfo reports " + std::to_string(free) + " of " +
           std::to_string(total) + " bytes free");
    last_filler_ = Block{.name = "last filler", .bytes = free - kMiB};
    calls.ok("cuMemAlloc_v2",
             [&] { return cuMemAlloc(&last_filler_.pointer, last_filler_.bytes); });
  }

  void past_budget() {
    const size_t first = blocks_.size();
    linear_routes(/*past=*/true);
    pool_routes(/*past=*/true);
    pool_growth_past_budget();
    vmm_route(/*past=*/true);
    unspilled_routes(/*past=*/true);
    for (size_t i = first; i < blocks_.size(); ++i) write_block(i);
    check_spill_tiers(first);
    if (spill_ != "off") {
      query_pointers(blocks_[first]);
      share(blocks_[first]);
    }
    // The budget held: the device holds no more than it, whatever spilled.
    size_t free = 0;
    size_t total = 0;
    calls.ok("cuMemGetInfo_v2", [&] { return real_memory_info(&free, &total); });
    if (total - free > budget_)
      fail("the device holds " + std::to_string(total - free) + " bytes, past the budget of " +
           std::to_string(budget_));
  }

  // The pool's unused reserve admits a request it cannot serve: the device's pool (32 MiB) holds
  // two 4 MiB blocks and a 16 MiB one whose free is held back on another stream, so 24 MiB is
  // unused but only 8 MiB can be handed out. A 12 MiB request grows the pool past the budget; the
  // shim gives the growth back (cuMemFreeAsync, cuStreamSynchronize, cuMemPoolTrimTo) and spills
  // the request or refuses it.
  void pool_growth_past_budget() {
    CUdeviceptr pending = 0;
    calls.ok("cuMemAllocAsync", [&] { return cuMemAllocAsync(&pending, 4 * kBlock, held_); });
    calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(held_); });
    Gate gate;
    calls.ok("cuLaunchHostFunc", [&] { return cuLaunchHostFunc(held_, &Gate::wait, &gate); });
    calls.ok("cuMemFreeAsync", [&] { return cuMemFreeAsync(pending, held_); });
    Block grown{.name = "cuMemAllocAsync (pool growth)",
                .bytes = 3 * kBlock,
                .free_route = FreeRoute::kFreeAsync};
    const CUresult result = calls.make("cuMemAllocAsync", spillable(true), [&] {
      return cuMemAllocAsync(&grown.pointer, grown.bytes, stream_);
    });
    // Open before anything else: a host-pool free waits for the whole context.
    gate.open();
    calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(held_); });
    if (result == CUDA_SUCCESS) blocks_.push_back(grown);
  }

  // --- data ------------------------------------------------------------------------------------

  void write_blocks() {
    for (size_t i = 0; i < blocks_.size(); ++i) write_block(i);
  }

  // Pattern words at both ends of block i, by a different copy route at each end.
  void write_block(size_t i) {
    const Block& block = blocks_[i];
    std::vector<uint32_t> words(kChecked / sizeof(uint32_t));
    for (size_t j = 0; j < words.size(); ++j) words[j] = pattern(i, j);
    calls.ok("cuMemcpyHtoD_v2",
             [&] { return cuMemcpyHtoD(block.pointer, words.data(), kChecked); });
    const CUdeviceptr tail = block.pointer + block.bytes - kChecked;
    for (size_t j = 0; j < words.size(); ++j) words[j] = pattern(i, words.size() + j);
    auto* staging = static_cast<uint32_t*>(pinned_);
    std::memcpy(staging, words.data(), kChecked);
    calls.ok("cuMemcpyHtoDAsync_v2",
             [&] { return cuMemcpyHtoDAsync(tail, staging, kChecked, stream_); });
    calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(stream_); });
  }

  // vs_fill_u32 over the first block's middle, then read back through a device-to-device copy
  // into the second block's middle.
  void launch_kernel() {
    const Block& first = blocks_.front();
    const Block& second = blocks_[1];
    CUdeviceptr middle = first.pointer + first.bytes / 2;
    uint32_t value = 0x5eed1e55u;
    uint64_t count = kChecked / sizeof(uint32_t);
    void* params[] = {&middle, &value, &count};
    calls.ok("cuLaunchKernel", [&] {
      return cuLaunchKernel(fill_, 16, 1, 1, 256, 1, 1, 0, stream_, params, nullptr);
    });
    calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(stream_); });
    const CUdeviceptr copy = second.pointer + second.bytes / 2;
    calls.ok("cuMemcpyDtoD_v2", [&] { return cuMemcpyDtoD(copy, middle, kChecked); });
    std::vector<uint32_t> words(count);
    calls.ok("cuMemcpyDtoH_v2", [&] { return cuMemcpyDtoH(words.data(), copy, kChecked); });
    for (size_t j = 0; j < words.size(); ++j)
      if (words[j] != value) fail("the kernel's bytes differ at word " + std::to_string(j));
  }

  // The pointer queries answer for `block` with its own extent.
  void query_pointers(const Block& block) {
    const CUdeviceptr inside = block.pointer + block.bytes / 2;
    CUdeviceptr base = 0;
    size_t size = 0;
    calls.ok("cuMemGetAddressRange_v2", [&] { return cuMemGetAddressRange(&base, &size, inside); });
    size_t range_size = 0;
    calls.ok("cuPointerGetAttribute", [&] {
      return cuPointerGetAttribute(&range_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inside);
    });
    CUdeviceptr range_start = 0;
    CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
    void* data[] = {&range_start};
    calls.ok("cuPointerGetAttributes",
             [&] { return cuPointerGetAttributes(1, attributes, data, inside); });
    if (base != block.pointer || size != block.bytes || range_size != block.bytes ||
        range_start != block.pointer)
      fail(std::string("the pointer queries of ") + block.name + " answer another extent");
  }

  // Whether `pointer` is device memory, by the driver's answer: a block within the budget may
  // have spilled all the same, when the driver refused it for want of memory (an injected
  // CUDA_ERROR_OUT_OF_MEMORY), and one past the budget may have found room.
  bool on_device(CUdeviceptr pointer) {
    int managed = 0;
    unsigned int memory_type = 0;
    calls.ok("cuPointerGetAttribute", [&] {
      return cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, pointer);
    });
    calls.ok("cuPointerGetAttribute", [&] {
      return cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pointer);
    });
    return managed == 0 && memory_type == CU_MEMORYTYPE_DEVICE;
  }

  // Spills land in the mode's tier: managed memory with auto, the pinned host pool with host
  // (cuMemAllocManaged always in managed memory). One failed call may send one spill elsewhere (a
  // tier that failed falls back to the next), never the ones after it.
  void check_spill_tiers(size_t first) {
    int elsewhere = 0;
    for (size_t i = first; i < blocks_.size(); ++i) {
      const Block& block = blocks_[i];
      int managed = 0;
      calls.ok("cuPointerGetAttribute", [&] {
        return cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, block.pointer);
      });
      const bool wants_managed =
          spill_ == "auto" || std::string_view(block.name) == "cuMemAllocManaged";
      if (!on_device(block.pointer) && (managed != 0) != wants_managed) ++elsewhere;
    }
    if (elsewhere > 1)
      fail(std::to_string(elsewhere) + " spills are not in the tier [spill] mode " + spill_ +
           " puts them in");
  }

  // CUDA IPC shares device memory; a spilled block is refused (hooks/ipc_hooks.cpp).
  void share(const Block& block) {
    CUipcMemHandle ipc{};
    calls.make("cuIpcGetMemHandle",
               on_device(block.pointer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE,
               [&] { return cuIpcGetMemHandle(&ipc, block.pointer); });
  }

  // Every block reads back what was written at both ends; the program's pinned memory is the
  // destination of the asynchronous reads.
  void check_blocks() {
    std::vector<uint32_t> words(kChecked / sizeof(uint32_t));
    auto* staging = static_cast<uint32_t*>(allocated_host_);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const Block& block = blocks_[i];
      calls.ok("cuMemcpyDtoH_v2",
               [&] { return cuMemcpyDtoH(words.data(), block.pointer, kChecked); });
      for (size_t j = 0; j < words.size(); ++j)
        if (words[j] != pattern(i, j))
          fail(std::string(block.name) + " differs at byte " + std::to_string(j * 4));
      calls.ok("cuMemcpyDtoHAsync_v2", [&] {
        return cuMemcpyDtoHAsync(staging, block.pointer + block.bytes - kChecked, kChecked,
                                 stream_);
      });
      calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(stream_); });
      for (size_t j = 0; j < words.size(); ++j)
        if (staging[j] != pattern(i, words.size() + j))
          fail(std::string(block.name) + " differs at byte " +
               std::to_string(block.bytes - kChecked + j * 4));
    }
  }

  // --- freeing ---------------------------------------------------------------------------------

  void free_block(const Block& block) {
    switch (block.free_route) {
      case FreeRoute::kFree:
        calls.ok("cuMemFree_v2", [&] { return cuMemFree(block.pointer); });
        break;
      case FreeRoute::kFreeAsync:
        calls.ok("cuMemFreeAsync", [&] { return cuMemFreeAsync(block.pointer, stream_); });
        break;
      case FreeRoute::kFreeAsyncPerThread:
        calls.ok("cuMemFreeAsync_ptsz", [&] { return free_async_ptsz_(block.pointer, nullptr); });
        break;
    }
  }

  void free_everything() {
    const auto is_vmm = [this](CUdeviceptr pointer) {
      return std::ranges::find(vmm_, pointer, &VmmMapping::address) != vmm_.end();
    };
    for (const Block& block : blocks_)
      if (!is_vmm(block.pointer)) free_block(block);
    free_block(filler_);
    free_block(last_filler_);
    for (const VmmMapping& vmm : vmm_) {
      calls.ok("cuMemUnmap", [&] { return cuMemUnmap(vmm.address, kBlock); });
      calls.ok("cuMemRelease", [&] { return cuMemRelease(vmm.handle); });
      calls.ok("cuMemAddressFree", [&] { return cuMemAddressFree(vmm.address, kBlock); });
    }
    for (CUarray array : arrays_) calls.ok("cuArrayDestroy", [&] { return cuArrayDestroy(array); });
    for (CUmipmappedArray array : mipmapped_)
      calls.ok("cuMipmappedArrayDestroy", [&] { return cuMipmappedArrayDestroy(array); });
    calls.ok("cuMemFree", [&] { return legacy_free_(0); });
    calls.ok("cuMemFreeHost", [&] { return cuMemFreeHost(pinned_); });
    calls.ok("cuMemFreeHost", [&] { return cuMemFreeHost(allocated_host_); });
    calls.ok("cuMemHostUnregister", [&] { return cuMemHostUnregister(registered_); });
    std::free(registered_);
    // The stream-ordered frees have run, and the pools have nothing left to keep.
    calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(stream_); });
    calls.ok("cuStreamSynchronize", [&] { return cuStreamSynchronize(CU_STREAM_PER_THREAD); });
    calls.ok("cuCtxSynchronize", [&] { return cuCtxSynchronize(); });
    calls.ok("cuMemPoolTrimTo", [&] { return cuMemPoolTrimTo(default_pool_, 0); });
    calls.ok("cuMemPoolDestroy", [&] { return cuMemPoolDestroy(pool_); });
  }

  // The ledger is whole: the budget is free again, and the device holds nothing.
  void check_budget_whole() {
    const auto [free, total] = memory_info();
    if (free != budget_ || total != budget_)
      fail("after every free cuMemGetInfo reports " + std::to_string(free) + " of " +
           std::to_string(total) + " bytes free, not the whole budget");
    size_t device_free = 0;
    size_t device_total = 0;
    calls.ok("cuMemGetInfo_v2", [&] { return real_memory_info(&device_free, &device_total); });
    if (device_free != device_total)
      fail("after every free the device still holds " + std::to_string(device_total - device_free) +
           " bytes");
  }

  void tear_down() {
    calls.ok("cuStreamDestroy_v2", [&] { return cuStreamDestroy(stream_); });
    calls.ok("cuStreamDestroy_v2", [&] { return cuStreamDestroy(held_); });
    calls.ok("cuModuleUnload", [&] { return cuModuleUnload(module_); });
    // The context stack is the program's own: the one context it made current, and nothing the
    // shim pushed (the host tier pins in the pool's context, pushed and popped around it).
    CUcontext popped = nullptr;
    calls.ok("cuCtxPopCurrent_v2", [&] { return cuCtxPopCurrent(&popped); });
    CUcontext current = nullptr;
    calls.ok("cuCtxGetCurrent", [&] { return cuCtxGetCurrent(&current); });
    if (popped != context_ || current != nullptr)
      fail("the context stack holds a context the shim left behind");
    calls.ok("cuDevicePrimaryCtxRelease_v2", [&] { return cuDevicePrimaryCtxRelease(device_); });
  }

  const std::string spill_;
  const size_t budget_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream held_ = nullptr;
  CUmemoryPool pool_ = nullptr;
  CUmemoryPool default_pool_ = nullptr;
  decltype(&cuMemAllocAsync) alloc_async_ptsz_ = nullptr;
  decltype(&cuMemAllocFromPoolAsync) alloc_from_pool_ptsz_ = nullptr;
  decltype(&cuMemFreeAsync) free_async_ptsz_ = nullptr;
  LegacyAlloc legacy_alloc_ = nullptr;
  LegacyAllocPitch legacy_alloc_pitch_ = nullptr;
  LegacyFree legacy_free_ = nullptr;
  Block filler_{.name = "filler"};
  Block last_filler_{.name = "last filler"};
  std::vector<Block> blocks_;
  struct VmmMapping {
    CUmemGenericAllocationHandle handle = 0;
    CUdeviceptr address = 0;
  };
  std::vector<VmmMapping> vmm_;
  std::vector<CUarray> arrays_;
  std::vector<CUmipmappedArray> mipmapped_;
  void* pinned_ = nullptr;
  void* allocated_host_ = nullptr;
  void* registered_ = nullptr;
};

}  // namespace

int main() {
  Program().run();
  return 0;
}
