// What the shim adds to a hooked call's fast path, measured on simcuda or on the machine's real
// driver.
//
// Method: one process, the shim preloaded (the program re-executes itself with LD_PRELOAD when
// started without it, and with simcuda first on the loader path unless HOOK_BENCH_DRIVER=system:
// then the libcuda.so.1 the loader finds, a real GPU's driver; the program prints which library it
// measured, so a run can never pass one driver off as the other). Each benchmark calls the same driver function N times two ways:
//   shim    through the hook (the address a program linked to libcuda binds to under the preload)
//   driver  through the real driver's pointer, looked up with glibc's own dlsym in libcuda.so.1's
//           scope, where the preloaded shim is not
// Same arguments, same process, same driver state: the difference is the shim's cost.
//
// - AllocFree: cuMemAlloc_v2 + cuMemFree_v2 of 4 KiB. simcuda's allocation is an mmap-backed
//   operation, so the pair is dominated by the driver; the shim adds the re-entry guard, the
//   ledger's admission and settlement and its allocation-table insert and erase.
// - LaunchRejected: cuLaunchKernel of a null function. The driver refuses it after a few checks
//   (CUDA_ERROR_INVALID_HANDLE), so the driver's share is small and the pass-through hook's own
//   cost (one relaxed load, one indirect call) is visible. The hook forwards without looking at
//   the arguments, so this is exactly the path a successful launch takes through the shim.
// - LaunchQueued: a real launch (vs_fill_u32, 0 elements) on a stream; simcuda packs the
//   arguments and queues work for the stream's thread, which dominates and makes this one noisy.
//   The stream is synchronised every 256 launches (in both variants alike). A real driver needs
//   the kernels' image: HOOK_BENCH_KERNELS=build/simcuda/vs_kernels.fatbin (built with nvcc).
//
// Run by hand: build/tests/shim/bench/vramspill_hook_bench --benchmark_repetitions=5, or on a
// GPU as tools/gpu-check.sh does (a ctest, hook_bench_smoke, only proves it runs on simcuda).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kAllocBytes = 4096;

// The path of the object that holds `address`, as the loader found it; empty if none.
std::string object_path(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

std::string object_of(const void* address) {
  const std::string path = object_path(address);
  return path.substr(path.rfind('/') + 1);
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "vramspill_hook_bench: %s\n", message.c_str());
  std::exit(2);
}

void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) die(std::string(what) + " returned " + std::to_string(result));
}

// Whether HOOK_BENCH_DRIVER asks for the machine's own driver instead of simcuda.
bool system_driver() {
  const char* driver = std::getenv("HOOK_BENCH_DRIVER");
  if (driver == nullptr || std::strcmp(driver, "simcuda") == 0) return false;
  if (std::strcmp(driver, "system") == 0) return true;
  die(std::string("HOOK_BENCH_DRIVER must be simcuda or system, not '") + driver + "'");
}

// Restarts this program with the shim preloaded and (unless the system's driver is asked for)
// simcuda on the loader path, unless the shim is already loaded.
void ensure_preloaded(char** argv) {
  if (dlopen("libvramspill.so", RTLD_NOW | RTLD_NOLOAD) != nullptr) return;
  if (std::getenv("HOOK_BENCH_REEXECUTED") != nullptr)
    die("libvramspill.so is not loaded even with LD_PRELOAD=" VRAMSPILL_TEST_PRELOAD);
  setenv("HOOK_BENCH_REEXECUTED", "1", 1);
  setenv("LD_PRELOAD", VRAMSPILL_TEST_PRELOAD, 1);
  if (!system_driver()) {
    std::string library_path = VRAMSPILL_TEST_SIMCUDA_DIR;
    if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
      library_path += std::string(":") + old;
    setenv("LD_LIBRARY_PATH", library_path.c_str(), 1);
  }
  execv("/proc/self/exe", argv);
  die(std::string("cannot re-execute: ") + std::strerror(errno));
}

template <typename Function>
struct Pair {
  Function shim = nullptr;
  Function driver = nullptr;
  Function get(bool through_shim) const { return through_shim ? shim : driver; }
};

// glibc's own dlsym (the shim's dlsym would hand out hooks for driver names).
void* lookup(void* handle, const char* name) {
  using DlsymFunction = void* (*)(void*, const char*);
  static const DlsymFunction libc_dlsym = [] {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    auto* function = reinterpret_cast<DlsymFunction>(dlvsym(libc, "dlsym", "GLIBC_2.34"));
    if (function == nullptr)
      function = reinterpret_cast<DlsymFunction>(dlvsym(libc, "dlsym", "GLIBC_2.2.5"));
    if (function == nullptr) die("cannot find the C library's dlsym");
    return function;
  }();
  return libc_dlsym(handle, name);
}

void* shim_handle = nullptr;
void* driver_handle = nullptr;

// The hook: the shim's own export, which is what a program linked to libcuda.so.1 binds to when
// the shim is preloaded. The driver: the same export in libcuda.so.1's scope.
template <typename Function>
Pair<Function> pair_of(const char* name) {
  Pair<Function> pair{reinterpret_cast<Function>(lookup(shim_handle, name)),
                      reinterpret_cast<Function>(lookup(driver_handle, name))};
  if (object_of(reinterpret_cast<void*>(pair.shim)) != "libvramspill.so")
    die(std::string(name) + " is not the shim's hook");
  if (object_of(reinterpret_cast<void*>(pair.driver)) != "libcuda.so.1")
    die(std::string(name) + ": the real driver function was not found");
  return pair;
}

// A driver function the shim does not hook (set-up only).
template <typename Function>
Function driver_function(const char* name) {
  auto* function = reinterpret_cast<Function>(lookup(driver_handle, name));
  if (function == nullptr) die(std::string("libcuda.so.1 has no ") + name);
  return function;
}

struct Functions {
  Pair<decltype(&cuMemAlloc_v2)> alloc;
  Pair<decltype(&cuMemFree_v2)> free;
  Pair<decltype(&cuLaunchKernel)> launch;
  decltype(&cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&cuCtxGetCurrent) get_current = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
};

Functions functions;
CUcontext context = nullptr;
CUfunction fill_function = nullptr;
CUstream stream = nullptr;

// The kernels' module: simcuda takes any image; a real driver needs HOOK_BENCH_KERNELS. Null
// function (LaunchQueued then reports an error) when there is none.
CUfunction load_fill_function() {
  CUmodule module = nullptr;
  const char* image_path = std::getenv("HOOK_BENCH_KERNELS");
  const CUresult loaded =
      image_path != nullptr
          ? driver_function<decltype(&cuModuleLoad)>("cuModuleLoad")(&module, image_path)
          : driver_function<decltype(&cuModuleLoadData)>("cuModuleLoadData")(
                &module, "simcuda accepts any image");
  CUfunction function = nullptr;
  if (loaded != CUDA_SUCCESS ||
      driver_function<decltype(&cuModuleGetFunction)>("cuModuleGetFunction")(
          &function, module, "vs_fill_u32") != CUDA_SUCCESS) {
    std::fprintf(stderr, "vramspill_hook_bench: no vs_fill_u32 (%s): LaunchQueued cannot run\n",
                 image_path != nullptr ? image_path : "set HOOK_BENCH_KERNELS on a real driver");
    return nullptr;
  }
  return function;
}

void set_up() {
  // The program does not link libcuda (it would not start without simcuda on the loader path;
  // ensure_preloaded() puts it there): the driver is opened here, as the CUDA runtime does.
  driver_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver_handle == nullptr) die(std::string("cannot load libcuda.so.1: ") + dlerror());
  shim_handle = dlopen("libvramspill.so", RTLD_NOW | RTLD_NOLOAD);
  const Pair<decltype(&cuInit)> init = pair_of<decltype(&cuInit)>("cuInit");
  check(init.shim(0), "cuInit");
  CUdevice device = 0;
  check(driver_function<decltype(&cuDeviceGet)>("cuDeviceGet")(&device, 0), "cuDeviceGet");
  check(driver_function<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain")(&context,
                                                                                         device),
        "cuDevicePrimaryCtxRetain");
  functions.get_current = driver_function<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent");
  functions.set_current = driver_function<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
  check(functions.set_current(context), "cuCtxSetCurrent");
  functions.alloc = pair_of<decltype(&cuMemAlloc_v2)>("cuMemAlloc_v2");
  functions.free = pair_of<decltype(&cuMemFree_v2)>("cuMemFree_v2");
  functions.launch = pair_of<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  functions.stream_synchronize =
      driver_function<decltype(&cuStreamSynchronize)>("cuStreamSynchronize");
  fill_function = load_fill_function();
  std::fprintf(stderr, "vramspill_hook_bench: driver measured: %s\n",
               object_path(reinterpret_cast<const void*>(functions.alloc.driver)).c_str());
  check(
      driver_function<decltype(&cuStreamCreate)>("cuStreamCreate")(&stream, CU_STREAM_NON_BLOCKING),
      "cuStreamCreate");
}

// Threads other than the main one need the context current.
void make_context_current() {
  CUcontext current = nullptr;
  if (functions.get_current(&current) == CUDA_SUCCESS && current == context) return;
  check(functions.set_current(context), "cuCtxSetCurrent");
}

void BM_AllocFree(benchmark::State& state) {
  make_context_current();
  const bool through_shim = state.range(0) != 0;
  const auto alloc = functions.alloc.get(through_shim);
  const auto free = functions.free.get(through_shim);
  for (auto _ : state) {
    CUdeviceptr pointer = 0;
    if (alloc(&pointer, kAllocBytes) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemAlloc_v2 failed");
      break;
    }
    benchmark::DoNotOptimize(pointer);
    if (free(pointer) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemFree_v2 failed");
      break;
    }
  }
  state.SetLabel(through_shim ? "shim" : "driver");
}
BENCHMARK(BM_AllocFree)->ArgName("shim")->Arg(0)->Arg(1);

// The pair through the driver and through the shim, back to back in each iteration (their
// order alternating), each timed: simcuda's pair costs tens of microseconds with a long tail
// (mmap, munmap, a loaded machine), so two separate runs cannot resolve the shim's share; the
// paired differences can. Counters: added_ns_median (median of shim pair minus driver pair,
// robust to the tail: the figure to read), added_ns_mean and its standard error, and the
// driver pair's median. With shim:0 both sides call the driver: the control, which should read
// about 0.
void BM_AllocFreePaired(benchmark::State& state) {
  make_context_current();
  using Clock = std::chrono::steady_clock;
  const bool control = state.range(0) == 0;
  const auto pair = [control](bool through_shim) {
    through_shim = through_shim && !control;
    CUdeviceptr pointer = 0;
    const Clock::time_point start = Clock::now();
    const bool ok = functions.alloc.get(through_shim)(&pointer, kAllocBytes) == CUDA_SUCCESS &&
                    functions.free.get(through_shim)(pointer) == CUDA_SUCCESS;
    const Clock::time_point end = Clock::now();
    return ok ? std::chrono::duration<double, std::nano>(end - start).count() : -1.0;
  };
  std::vector<double> differences;
  std::vector<double> driver_times;
  differences.reserve(1 << 20);
  driver_times.reserve(1 << 20);
  for (auto _ : state) {
    const bool shim_first = (differences.size() & 1) != 0;
    const double first = pair(shim_first);
    const double second = pair(!shim_first);
    if (first < 0 || second < 0) {
      state.SkipWithError("cuMemAlloc_v2 or cuMemFree_v2 failed");
      break;
    }
    const double shim = shim_first ? first : second;
    const double driver = shim_first ? second : first;
    differences.push_back(shim - driver);
    driver_times.push_back(driver);
  }
  const auto median = [](std::vector<double>& values) {
    const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), middle, values.end());
    return *middle;
  };
  if (differences.size() > 1) {
    const double n = static_cast<double>(differences.size());
    double sum = 0, sum_of_squares = 0;
    for (const double d : differences) {
      sum += d;
      sum_of_squares += d * d;
    }
    const double mean = sum / n;
    const double variance = std::max((sum_of_squares - mean * mean * n) / (n - 1), 0.0);
    state.counters["added_ns_median"] = median(differences);
    state.counters["added_ns_mean"] = mean;
    state.counters["added_ns_mean_se"] = std::sqrt(variance / n);
    state.counters["driver_pair_ns_median"] = median(driver_times);
  }
}
BENCHMARK(BM_AllocFreePaired)->ArgName("shim")->Arg(0)->Arg(1);

void BM_LaunchRejected(benchmark::State& state) {
  make_context_current();
  const auto launch = functions.launch.get(state.range(0) != 0);
  for (auto _ : state) {
    const CUresult result = launch(nullptr, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
    benchmark::DoNotOptimize(result);
  }
  if (launch(nullptr, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr) != CUDA_ERROR_INVALID_HANDLE)
    state.SkipWithError("the driver did not refuse a null function");
  state.SetLabel(state.range(0) != 0 ? "shim" : "driver");
}
BENCHMARK(BM_LaunchRejected)->ArgName("shim")->Arg(0)->Arg(1);

void BM_LaunchQueued(benchmark::State& state) {
  if (fill_function == nullptr) {
    state.SkipWithError("no vs_fill_u32 to launch (HOOK_BENCH_KERNELS)");
    return;
  }
  make_context_current();
  const auto launch = functions.launch.get(state.range(0) != 0);
  CUdeviceptr destination = 0;
  uint32_t value = 7;
  uint64_t count = 0;
  void* params[] = {&destination, &value, &count};
  int queued = 0;
  for (auto _ : state) {
    if (launch(fill_function, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS) {
      state.SkipWithError("cuLaunchKernel failed");
      break;
    }
    if (++queued == 256) {
      queued = 0;
      functions.stream_synchronize(stream);
    }
  }
  functions.stream_synchronize(stream);
  state.SetLabel(state.range(0) != 0 ? "shim" : "driver");
}
BENCHMARK(BM_LaunchQueued)->ArgName("shim")->Arg(0)->Arg(1);

}  // namespace

int main(int argc, char** argv) {
  ensure_preloaded(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  set_up();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
