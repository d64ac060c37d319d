// Runs with libvramspill.so preloaded and simcuda first on the loader path (CMake sets both):
// once the shim has initialised, the process still gets its allocator from the C library and its
// C++ exception unwinder from libgcc_s, and exceptions still work (shim/README.md, "What a
// preloaded library may link").
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace {

// The file name (without directories) of the object that defines `address`.
std::string object_of(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_sanitizer_runtime(const std::string& object) {
  return object.rfind("libasan.so", 0) == 0 || object.rfind("libubsan.so", 0) == 0;
}

class PreloadedShim : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The shim is preloaded and initialises on the first hooked call.
    ASSERT_NE(dlopen("libvramspill.so", RTLD_NOW | RTLD_NOLOAD), nullptr)
        << "the test must run with libvramspill.so in LD_PRELOAD";
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUdevice device = 0;
    CUcontext context = nullptr;
    ASSERT_EQ(cuDeviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context), CUDA_SUCCESS);
    CUdeviceptr pointer = 0;
    ASSERT_EQ(cuMemAlloc(&pointer, 1 << 20), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree(pointer), CUDA_SUCCESS);
  }
};

TEST_F(PreloadedShim, HooksAreTheShims) {
  EXPECT_EQ(object_of(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")), "libvramspill.so");
  EXPECT_EQ(object_of(reinterpret_cast<void*>(&cuMemAlloc)), "libvramspill.so");
}

TEST_F(PreloadedShim, MallocComesFromTheCLibrary) {
  const std::string object = object_of(dlsym(RTLD_DEFAULT, "malloc"));
  if (VRAMSPILL_TEST_SANITIZED && is_sanitizer_runtime(object)) return;  // ASan's interceptor
  EXPECT_EQ(object, "libc.so.6");
  EXPECT_EQ(object_of(dlsym(RTLD_DEFAULT, "free")), "libc.so.6");
}

TEST_F(PreloadedShim, UnwinderComesFromLibgcc) {
  for (const char* name : {"_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_Backtrace"}) {
    const std::string object = object_of(dlsym(RTLD_DEFAULT, name));
    if (VRAMSPILL_TEST_SANITIZED && is_sanitizer_runtime(object)) continue;  // interceptor
    EXPECT_EQ(object, "libgcc_s.so.1") << name;
  }
}

TEST_F(PreloadedShim, NeitherMimallocNorLibunwindIsInTheGlobalScope) {
  for (const char* name : {"mi_malloc", "unw_backtrace", "_ULx86_64_step", "_ULaarch64_step"})
    EXPECT_EQ(dlsym(RTLD_DEFAULT, name), nullptr) << name;
}

[[gnu::noinline]] void throw_through(int depth) {
  if (depth == 0) throw std::runtime_error("thrown after the shim initialised");
  throw_through(depth - 1);
  asm volatile("");  // not a tail call: the unwinder walks every frame
}

TEST_F(PreloadedShim, CxxExceptionsStillWork) {
  std::string caught;
  try {
    throw_through(8);
  } catch (const std::runtime_error& error) {
    caught = error.what();
  }
  EXPECT_EQ(caught, "thrown after the shim initialised");
  // And a hooked call still works afterwards.
  CUdeviceptr pointer = 0;
  EXPECT_EQ(cuMemAlloc(&pointer, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(pointer), CUDA_SUCCESS);
}

}  // namespace
