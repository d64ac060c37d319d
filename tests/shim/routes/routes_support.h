// Shared helpers for the route tests: driver-API programs that run once under the shim
// (LD_PRELOAD=libvramspill.so, ROUTES_EXPECT=shim) and once without it (ROUTES_EXPECT=driver),
// both on simcuda (tests/shim/routes/CMakeLists.txt sets the environment).
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#define ASSERT_CU(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call
#define EXPECT_CU(call) EXPECT_EQ((call), CUDA_SUCCESS) << #call

namespace routes {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
// What CMakeLists.txt configures: VRAMSPILL_DEVICE_BUDGET=256MiB on simcuda's 1 GiB device.
constexpr size_t kBudget = 256 * kMiB;
constexpr size_t kDeviceMemory = kGiB;

// Whether this run is the one under the shim; from ROUTES_EXPECT, which each ctest sets.
inline bool under_shim() {
  const char* expect = std::getenv("ROUTES_EXPECT");
  return expect != nullptr && std::string_view(expect) == "shim";
}

// Whether libvramspill.so is loaded in this process.
inline bool shim_is_loaded() {
  bool found = false;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libvramspill.so"))
          *static_cast<bool*>(data) = true;
        return 0;
      },
      &found);
  return found;
}

// Checks that ROUTES_EXPECT is set and agrees with what is loaded: a test that expects the
// shim's answers must not pass by accident without it, and the other way round.
inline void check_mode() {
  const char* expect = std::getenv("ROUTES_EXPECT");
  ASSERT_NE(expect, nullptr) << "ROUTES_EXPECT (shim or driver) is not set";
  ASSERT_TRUE(std::string_view(expect) == "shim" || std::string_view(expect) == "driver")
      << expect;
  ASSERT_EQ(shim_is_loaded(), under_shim())
      << "ROUTES_EXPECT=" << expect << " but libvramspill.so is "
      << (shim_is_loaded() ? "" : "not ") << "loaded";
}

// Which library and which export an address is.
struct Symbol {
  std::string library;  // dli_fname
  std::string name;     // dli_sname; empty if none
  bool exact = false;   // the address is the symbol's start
};

inline Symbol symbol_of(const void* address) {
  Dl_info info{};
  Symbol symbol;
  if (address == nullptr || dladdr(address, &info) == 0) return symbol;
  if (info.dli_fname != nullptr) symbol.library = info.dli_fname;
  if (info.dli_sname != nullptr) symbol.name = info.dli_sname;
  symbol.exact = info.dli_saddr == address;
  return symbol;
}

inline bool in_shim(const Symbol& symbol) {
  return symbol.library.find("libvramspill.so") != std::string::npos;
}
inline bool in_driver(const Symbol& symbol) {
  return symbol.library.find("libcuda.so") != std::string::npos;
}

// gtest assertion: `address` is the start of export `name`, in the shim when `from_shim`, in the
// driver (simcuda's libcuda.so.1) otherwise.
inline ::testing::AssertionResult is_export(const void* address, std::string_view name,
                                            bool from_shim) {
  const Symbol symbol = symbol_of(address);
  const bool right_library = from_shim ? in_shim(symbol) : in_driver(symbol);
  if (address != nullptr && symbol.exact && symbol.name == name && right_library)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected " << name << " of " << (from_shim ? "libvramspill.so" : "libcuda.so.1")
         << ", got " << address << " = " << (symbol.name.empty() ? "?" : symbol.name) << " in "
         << (symbol.library.empty() ? "?" : symbol.library) << (symbol.exact ? "" : " (inside)");
}

// The per-thread-stream exports, which a program reaches only through cuGetProcAddress (cudart
// asks for them with flags 2 when built with --default-stream per-thread).
struct PerThreadExports {
  decltype(&cuMemAllocAsync) alloc_async = nullptr;
  decltype(&cuMemAllocFromPoolAsync) alloc_from_pool_async = nullptr;
  decltype(&cuMemFreeAsync) free_async = nullptr;
};

// Looks them up as cudart does; each must be exactly the per-thread export, the shim's hook for
// it when `from_shim`, the driver's otherwise.
inline void look_up_per_thread_exports(PerThreadExports& exports, bool from_shim) {
  const auto find = [from_shim](const char* name, const char* export_name, void** out) {
    CUdriverProcAddressQueryResult status{};
    ASSERT_CU(cuGetProcAddress(name, out, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                               &status));
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
    ASSERT_TRUE(is_export(*out, export_name, from_shim));
  };
  ASSERT_NO_FATAL_FAILURE(find("cuMemAllocAsync", "cuMemAllocAsync_ptsz",
                               reinterpret_cast<void**>(&exports.alloc_async)));
  ASSERT_NO_FATAL_FAILURE(find("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz",
                               reinterpret_cast<void**>(&exports.alloc_from_pool_async)));
  ASSERT_NO_FATAL_FAILURE(find("cuMemFreeAsync", "cuMemFreeAsync_ptsz",
                               reinterpret_cast<void**>(&exports.free_async)));
}

// A test with device 0's primary context current; free_bytes() is cuMemGetInfo's free figure
// after checking its total (the budget under the shim, the device's memory without it). `Base` is
// ::testing::Test or a ::testing::TestWithParam<...>.
template <typename Base = ::testing::Test>
class PrimaryContextTest : public Base {
 public:
  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }

 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(check_mode());
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDeviceGet(&device_, 0));
    ASSERT_CU(cuDevicePrimaryCtxRetain(&context_, device_));
    ASSERT_CU(cuCtxSetCurrent(context_));
  }

  void TearDown() override {
    if (context_ != nullptr) {
      EXPECT_CU(cuDevicePrimaryCtxRelease(device_));
    }
  }

  static size_t free_bytes() {
    size_t free = 0;
    size_t total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    EXPECT_EQ(total, under_shim() ? kBudget : kDeviceMemory);
    EXPECT_LE(free, total);
    return free;
  }

 private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

}  // namespace routes
