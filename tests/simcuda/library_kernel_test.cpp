// Libraries and their CUkernel handles, as the driver keeps them apart from CUfunction handles
// (Note [Functions and kernels] in tools/simcuda/src/core/loaded_code.h). Measured on an H200
// (driver 580, CUDA 13.0): cudart launches CUkernel handles through cuLaunchKernel and
// cuLaunchKernelEx; cuFuncGetParamInfo refuses one with CUDA_ERROR_INVALID_HANDLE, while
// cuKernelGetParamInfo reads it and cuFuncGetParamInfo reads the CUfunction from
// cuKernelGetFunction, a different handle.
#include <array>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "driver_test_support.h"

// The per-thread-default-stream exports, as nvcc's --default-stream per-thread selects them.
extern "C" {
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int,
                                     unsigned int, unsigned int, unsigned int, unsigned int,
                                     CUstream, void**, void**);
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig*, CUfunction, void**, void**);
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned int, unsigned int,
                                                unsigned int, unsigned int, unsigned int,
                                                unsigned int, unsigned int, CUstream, void**);
}

namespace {

constexpr uint64_t kWords = 256;

// A library of the vs_* kernels (on a GPU, the fatbin VS_KERNELS_FATBIN names), its kernel
// vs_fill_u32, that kernel's function, and a buffer of kWords words for it to fill.
class LibraryKernelTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    library_ = load_library();
    ASSERT_NE(library_, nullptr);
    ASSERT_CU(cuLibraryGetKernel(&kernel_, library_, "vs_fill_u32"));
    ASSERT_CU(cuKernelGetFunction(&function_, kernel_));
    ASSERT_CU(cuMemAlloc(&buffer_, kWords * 4));
  }
  void TearDown() override {
    if (buffer_ != 0) cuMemFree(buffer_);
    if (library_ != nullptr) cuLibraryUnload(library_);
    DriverTest::TearDown();
  }

  static CUlibrary load_library() {
    CUlibrary library = nullptr;
    const char* image = std::getenv("VS_KERNELS_FATBIN");
    const CUresult result =
        image != nullptr
            ? cuLibraryLoadFromFile(&library, image, nullptr, nullptr, 0, nullptr, nullptr, 0)
            : cuLibraryLoadData(&library, "simcuda accepts any image", nullptr, nullptr, 0, nullptr,
                                nullptr, 0);
    EXPECT_CU(result);
    return library;
  }

  // Fills the buffer with `value` by `launch` (given vs_fill_u32's kernelParams), and says
  // whether every word holds it afterwards.
  bool fills(uint32_t value, const std::function<CUresult(void**)>& launch) {
    uint64_t count = kWords;
    void* params[] = {&buffer_, &value, &count};
    EXPECT_CU(launch(params));
    EXPECT_CU(cuCtxSynchronize());
    return download<uint32_t>(buffer_, kWords) == std::vector<uint32_t>(kWords, value);
  }

  CUlibrary library_ = nullptr;
  CUkernel kernel_ = nullptr;
  CUfunction function_ = nullptr;
  CUdeviceptr buffer_ = 0;
};

CUfunction as_function(CUkernel kernel) { return reinterpret_cast<CUfunction>(kernel); }
CUkernel as_kernel(CUfunction function) { return reinterpret_cast<CUkernel>(function); }

TEST_F(LibraryKernelTest, AKernelIsNotItsFunction) {
  EXPECT_NE(reinterpret_cast<void*>(kernel_), reinterpret_cast<void*>(function_));
  size_t offset = 0, size = 0;
  // The fact that hid every PyTorch launch from the shim: the function query refuses a kernel.
  EXPECT_EQ(cuFuncGetParamInfo(as_function(kernel_), 2, &offset, &size), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuKernelGetParamInfo(kernel_, 2, &offset, &size));
  EXPECT_EQ(offset, 16u);
  EXPECT_EQ(size, 8u);
  offset = size = 0;
  ASSERT_CU(cuFuncGetParamInfo(function_, 2, &offset, &size));
  EXPECT_EQ(offset, 16u);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(cuKernelGetParamInfo(kernel_, 3, &offset, &size), CUDA_ERROR_INVALID_VALUE);

  // The kernel calls take kernels only (simcuda's reading; the documentation names no other).
  EXPECT_EQ(cuKernelGetParamInfo(as_kernel(function_), 0, &offset, &size),
            CUDA_ERROR_INVALID_HANDLE);
  CUfunction function = nullptr;
  EXPECT_EQ(cuKernelGetFunction(&function, as_kernel(function_)), CUDA_ERROR_INVALID_HANDLE);
  const char* name = nullptr;
  EXPECT_EQ(cuKernelGetName(&name, as_kernel(function_)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuKernelGetName(&name, kernel_));
  EXPECT_STREQ(name, "vs_fill_u32");
  CUlibrary owner = nullptr;
  EXPECT_EQ(cuKernelGetLibrary(&owner, as_kernel(function_)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuKernelGetLibrary(&owner, kernel_));
  EXPECT_EQ(owner, library_);
}

// CUDA_MODULE_LOADING=EAGER changed nothing of the above on the H200; it changes only what
// cuModuleGetLoadingMode reports (read at each call).
TEST_F(LibraryKernelTest, EagerLoadingKeepsTheHandlesApart) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  CUmoduleLoadingMode mode{};
  ASSERT_CU(cuModuleGetLoadingMode(&mode));
  EXPECT_EQ(mode, CU_MODULE_EAGER_LOADING);
  const CUlibrary eager = load_library();
  CUkernel kernel = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&kernel, eager, "vs_copy"));
  size_t offset = 0;
  EXPECT_EQ(cuFuncGetParamInfo(as_function(kernel), 1, &offset, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuKernelGetParamInfo(kernel, 1, &offset, nullptr));
  EXPECT_EQ(offset, 8u);
  ASSERT_CU(cuLibraryUnload(eager));
  unsetenv("CUDA_MODULE_LOADING");
  ASSERT_CU(cuModuleGetLoadingMode(&mode));
  EXPECT_EQ(mode, CU_MODULE_LAZY_LOADING);
}

TEST_F(LibraryKernelTest, TheKernelsFunctionIsTheLibraryModulesFunction) {
  // One module per library serves every context on simcuda; on a GPU each context has its own
  // module and functions, and both calls answer for the current one.
  CUmodule module = nullptr;
  ASSERT_CU(cuLibraryGetModule(&module, library_));
  CUfunction from_module = nullptr;
  ASSERT_CU(cuModuleGetFunction(&from_module, module, "vs_fill_u32"));
  EXPECT_EQ(from_module, function_);
  CUfunction again = nullptr;
  ASSERT_CU(cuKernelGetFunction(&again, kernel_));
  EXPECT_EQ(again, function_);
  CUmodule function_module = nullptr;
  ASSERT_CU(cuFuncGetModule(&function_module, function_));
  EXPECT_EQ(function_module, module);
  EXPECT_EQ(cuModuleUnload(module), CUDA_ERROR_INVALID_HANDLE);  // the library owns it

  // A function for the current context: none is current, none is given.
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(cuKernelGetFunction(&again, kernel_), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CU(cuCtxSetCurrent(context_));
}

TEST_F(LibraryKernelTest, EnumeratedKernelsAreTheKernelsByName) {
  unsigned int count = 0;
  ASSERT_CU(cuLibraryGetKernelCount(&count, library_));
  ASSERT_EQ(count, 4u);  // vs_fill_u32, vs_copy, vs_axpy_f32, vs_touch
  std::array<CUkernel, 4> kernels{};
  ASSERT_CU(cuLibraryEnumerateKernels(kernels.data(), count, library_));
  for (CUkernel kernel : kernels) {
    const char* name = nullptr;
    ASSERT_CU(cuKernelGetName(&name, kernel));
    CUkernel by_name = nullptr;
    ASSERT_CU(cuLibraryGetKernel(&by_name, library_, name));
    EXPECT_EQ(kernel, by_name) << name;
    size_t offset = 0;
    EXPECT_EQ(cuFuncGetParamInfo(as_function(kernel), 0, &offset, nullptr),
              CUDA_ERROR_INVALID_HANDLE)
        << name;
  }
  CUkernel missing = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&missing, library_, "vs_missing"), CUDA_ERROR_NOT_FOUND);
  // Another library of the same image has kernels of its own.
  const CUlibrary other = load_library();
  CUkernel other_fill = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&other_fill, other, "vs_fill_u32"));
  EXPECT_NE(other_fill, kernel_);
  ASSERT_CU(cuLibraryUnload(other));
}

// cudart passes a CUkernel as the CUfunction of every launch call; a module's function works too.
TEST_F(LibraryKernelTest, EveryLaunchCallTakesEitherHandle) {
  CUstream stream = nullptr;
  ASSERT_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const auto config = [stream](unsigned int grid) {
    CUlaunchConfig launch{};
    launch.gridDimX = grid;
    launch.gridDimY = launch.gridDimZ = 1;
    launch.blockDimX = 128;
    launch.blockDimY = launch.blockDimZ = 1;
    launch.hStream = stream;
    return launch;
  };
  using Launch = std::function<CUresult(CUfunction, void**)>;
  const std::vector<std::pair<std::string, Launch>> calls = {
      {"cuLaunchKernel",
       [](CUfunction f, void** p) {
         return cuLaunchKernel(f, 2, 1, 1, 128, 1, 1, 0, nullptr, p, nullptr);
       }},
      {"cuLaunchKernel_ptsz",
       [](CUfunction f, void** p) {
         return cuLaunchKernel_ptsz(f, 2, 1, 1, 128, 1, 1, 0, nullptr, p, nullptr);
       }},
      {"cuLaunchKernelEx",
       [&](CUfunction f, void** p) {
         const CUlaunchConfig launch = config(2);
         return cuLaunchKernelEx(&launch, f, p, nullptr);
       }},
      {"cuLaunchKernelEx_ptsz",
       [&](CUfunction f, void** p) {
         const CUlaunchConfig launch = config(2);
         return cuLaunchKernelEx_ptsz(&launch, f, p, nullptr);
       }},
      {"cuLaunchCooperativeKernel",
       [stream](CUfunction f, void** p) {
         return cuLaunchCooperativeKernel(f, 2, 1, 1, 128, 1, 1, 0, stream, p);
       }},
      {"cuLaunchCooperativeKernel_ptsz",
       [](CUfunction f, void** p) {
         return cuLaunchCooperativeKernel_ptsz(f, 2, 1, 1, 128, 1, 1, 0, nullptr, p);
       }},
  };
  uint32_t value = 100;
  for (const auto& [name, launch] : calls) {
    for (const auto& [handle_kind, handle] :
         {std::pair{"kernel", as_function(kernel_)}, std::pair{"function", function_}}) {
      SCOPED_TRACE(name + " with the " + handle_kind);
      EXPECT_TRUE(
          fills(++value, [&launch, handle](void** params) { return launch(handle, params); }));
    }
  }
  ASSERT_CU(cuStreamDestroy(stream));
}

TEST_F(LibraryKernelTest, ACooperativeGridMustFitOnTheDeviceAtOnce) {
  // 132 multiprocessors of 2048 threads, 32 blocks each at most: 1024-thread blocks fit two to a
  // multiprocessor, 32-thread blocks 32.
  uint64_t count = kWords;
  uint32_t value = 1;
  void* params[] = {&buffer_, &value, &count};
  for (const auto& [block, most] : {std::pair{1024u, 264u}, std::pair{32u, 4224u}}) {
    SCOPED_TRACE(block);
    EXPECT_CU(cuLaunchCooperativeKernel(as_function(kernel_), most, 1, 1, block, 1, 1, 0, nullptr,
                                        params));
    EXPECT_EQ(cuLaunchCooperativeKernel(as_function(kernel_), most + 1, 1, 1, block, 1, 1, 0,
                                        nullptr, params),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  }
  ASSERT_CU(cuCtxSynchronize());
  int supported = 0;
  ASSERT_CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, device_));
  EXPECT_EQ(supported, 1);
}

// In a child with COOPERATIVE_LAUNCH=0: exits 0 when a cooperative launch is refused as not
// supported.
[[noreturn]] void launch_cooperatively_without_support() {
  init_child_with_attributes("COOPERATIVE_LAUNCH=0", 2);
  CUlibrary library = nullptr;
  CUkernel kernel = nullptr;
  CUdeviceptr buffer = 0;
  if (cuLibraryLoadData(&library, "image", nullptr, nullptr, 0, nullptr, nullptr, 0) != 0 ||
      cuLibraryGetKernel(&kernel, library, "vs_fill_u32") != 0 || cuMemAlloc(&buffer, 4) != 0)
    std::exit(3);
  uint32_t value = 1;
  uint64_t count = 1;
  void* params[] = {&buffer, &value, &count};
  const CUresult result =
      cuLaunchCooperativeKernel(as_function(kernel), 1, 1, 1, 1, 1, 1, 0, nullptr, params);
  std::exit(result == CUDA_ERROR_NOT_SUPPORTED ? 0 : 4);
}

// It needs its own cuInit with SIMCUDA_ATTRS set, so it runs in a re-executed child.
TEST(LibraryKernelDeathTest, ACooperativeLaunchNeedsTheDevicesSupport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(launch_cooperatively_without_support(), ::testing::ExitedWithCode(0), "");
}

// cuKernelSetAttribute sets the kernel's value on one device, which cuKernelGetAttribute reads
// and its function inherits; cuFuncSetAttribute overrides it for the function only, before or
// after (cuda.h documents both rules).
TEST_F(LibraryKernelTest, KernelAttributesAreTheKernelsAndFunctionsOverrideThem) {
  constexpr auto kShared = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  const auto kernel_value = [this] {
    int value = -2;
    EXPECT_CU(cuKernelGetAttribute(&value, kShared, kernel_, device_));
    return value;
  };
  const auto function_value = [this](CUfunction function) {
    int value = -2;
    EXPECT_CU(cuFuncGetAttribute(&value, kShared, function));
    return value;
  };
  EXPECT_EQ(kernel_value(), 48 * 1024);
  ASSERT_CU(cuKernelSetAttribute(kShared, 100000, kernel_, device_));
  EXPECT_EQ(kernel_value(), 100000);
  EXPECT_EQ(function_value(function_), 100000);
  ASSERT_CU(cuFuncSetAttribute(function_, kShared, 20000));
  EXPECT_EQ(function_value(function_), 20000);
  EXPECT_EQ(kernel_value(), 100000);
  ASSERT_CU(cuKernelSetAttribute(kShared, 120000, kernel_, device_));
  EXPECT_EQ(function_value(function_), 20000);
  EXPECT_EQ(kernel_value(), 120000);

  EXPECT_EQ(cuKernelSetAttribute(kShared, 1 << 30, kernel_, device_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 8, kernel_, device_),
            CUDA_ERROR_INVALID_VALUE);
  int value = 0;
  EXPECT_EQ(cuKernelGetAttribute(&value, kShared, kernel_, 99), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuKernelSetAttribute(kShared, 0, kernel_, 99), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuKernelGetAttribute(&value, kShared, as_kernel(function_), device_),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_BINARY_VERSION, kernel_, device_));
  EXPECT_EQ(value, 90);

  // Another library's kernel of the same name keeps the defaults.
  const CUlibrary other = load_library();
  CUkernel other_fill = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&other_fill, other, "vs_fill_u32"));
  ASSERT_CU(cuKernelGetAttribute(&value, kShared, other_fill, device_));
  EXPECT_EQ(value, 48 * 1024);
  ASSERT_CU(cuLibraryUnload(other));
}

// Their documentation says nothing of a CUkernel; simcuda answers for the kernel's function
// (README, "Fidelity": unverified on a GPU).
TEST_F(LibraryKernelTest, OtherFunctionCallsAnswerForTheKernelsFunction) {
  const char* name = nullptr;
  ASSERT_CU(cuFuncGetName(&name, as_function(kernel_)));
  EXPECT_STREQ(name, "vs_fill_u32");
  CUmodule kernel_module = nullptr, function_module = nullptr;
  ASSERT_CU(cuFuncGetModule(&kernel_module, as_function(kernel_)));
  ASSERT_CU(cuFuncGetModule(&function_module, function_));
  EXPECT_EQ(kernel_module, function_module);
  ASSERT_CU(cuFuncSetAttribute(as_function(kernel_),
                               CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 70000));
  int value = 0;
  ASSERT_CU(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function_));
  EXPECT_EQ(value, 70000);
  CUfunctionLoadingState state{};
  ASSERT_CU(cuFuncIsLoaded(&state, as_function(kernel_)));
  EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_LOADED);
  EXPECT_CU(cuFuncLoad(as_function(kernel_)));
  EXPECT_CU(cuFuncSetCacheConfig(as_function(kernel_), CU_FUNC_CACHE_PREFER_L1));
  EXPECT_CU(cuKernelSetCacheConfig(kernel_, CU_FUNC_CACHE_PREFER_L1, device_));
  EXPECT_EQ(cuKernelSetCacheConfig(as_kernel(function_), CU_FUNC_CACHE_PREFER_L1, device_),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelSetCacheConfig(kernel_, CU_FUNC_CACHE_PREFER_L1, 99),
            CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(LibraryKernelTest, UnloadingEndsEveryHandleButNotQueuedLaunches) {
  // A launch queued behind a long one is still waiting when the library goes.
  constexpr uint64_t kBig = uint64_t{32} << 20;
  CUdeviceptr busy = 0;
  ASSERT_CU(cuMemAlloc(&busy, kBig * 4));
  uint32_t one = 1, value = 7;
  uint64_t big = kBig, count = kWords;
  void* busy_params[] = {&busy, &one, &big};
  void* params[] = {&buffer_, &value, &count};
  ASSERT_CU(
      cuLaunchKernel(as_function(kernel_), 1, 1, 1, 1, 1, 1, 0, nullptr, busy_params, nullptr));
  ASSERT_CU(cuLaunchKernel(as_function(kernel_), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  CUmodule module = nullptr;
  ASSERT_CU(cuLibraryGetModule(&module, library_));
  ASSERT_CU(cuLibraryUnload(library_));
  const CUlibrary unloaded = std::exchange(library_, nullptr);
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(download<uint32_t>(buffer_, kWords), std::vector<uint32_t>(kWords, 7u));
  ASSERT_CU(cuMemFree(busy));

  size_t offset = 0;
  int attribute = 0;
  const char* name = nullptr;
  CUfunction function = nullptr;
  CUlibrary owner = nullptr;
  CUkernel kernel = nullptr;
  EXPECT_EQ(cuKernelGetFunction(&function, kernel_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetParamInfo(kernel_, 0, &offset, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetName(&name, kernel_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetLibrary(&owner, kernel_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetAttribute(&attribute, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel_, device_),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(
      cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, kernel_, device_),
      CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuFuncGetParamInfo(function_, 0, &offset, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuFuncGetName(&name, as_function(kernel_)), CUDA_ERROR_INVALID_HANDLE);
  for (CUfunction handle : {as_function(kernel_), function_}) {
    EXPECT_EQ(cuLaunchKernel(handle, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(cuLaunchCooperativeKernel(handle, 1, 1, 1, 1, 1, 1, 0, nullptr, params),
              CUDA_ERROR_INVALID_HANDLE);
  }
  EXPECT_EQ(cuModuleGetFunction(&function, module, "vs_fill_u32"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryGetKernel(&kernel, unloaded, "vs_fill_u32"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryUnload(unloaded), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(LibraryKernelTest, LibrariesLoadFromReadableFilesOnly) {
  CUlibrary library = nullptr;
  EXPECT_EQ(cuLibraryLoadFromFile(&library, "/nonexistent/vs_kernels.fatbin", nullptr, nullptr, 0,
                                  nullptr, nullptr, 0),
            CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuLibraryLoadData(&library, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(
      cuLibraryLoadFromFile(&library, "/proc/self/exe", nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&kernel, library, "vs_axpy_f32"));
  size_t offset = 0, size = 0;
  ASSERT_CU(cuKernelGetParamInfo(kernel, 2, &offset, &size));
  EXPECT_EQ(offset, 16u);
  EXPECT_EQ(size, 4u);
  ASSERT_CU(cuLibraryUnload(library));
}

}  // namespace
