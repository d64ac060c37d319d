// A program that does not link libcuda but dlopen()s libcuda.so.1 and dlsym()s the versioned
// export names, as cudart does when its "" probe says the driver is a stub library, and as NCCL
// and frameworks' own loaders do (shim/README.md, "Interception").
//
// Under the shim (ROUTES_EXPECT=shim) every hooked export comes back as the shim's hook for
// exactly that export (the shim's own definition of the name); every other export comes back
// as the driver's own, and the budget holds through the pointers. Without the preload
// (ROUTES_EXPECT=driver) every pointer is the driver's.
//
// Note that the dlsym calls below are themselves the shim's (it overrides dlsym), so pointers
// are told apart by dladdr's library name, never by comparing with another dlsym.
#include <string>
#include <vector>

#include "driver/driver_functions.h"
#include "routes_support.h"

namespace {

using routes::check_mode;
using routes::is_export;
using routes::kBudget;
using routes::kDeviceMemory;
using routes::kMiB;
using routes::symbol_of;
using routes::under_shim;

const std::vector<std::string>& hooked_exports() {
  static const std::vector<std::string> names = {
#define ROUTES_NAME(name) #name,
      VRAMSPILL_HOOKED_FUNCTIONS(ROUTES_NAME)
#undef ROUTES_NAME
  };
  return names;
}

// The shim's own definition of `name` (its dlsym answers from the shim's handle as glibc's does).
void* shim_definition(const char* name) {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libvramspill.so"))
          *static_cast<std::string*>(data) = info->dlpi_name;
        return 0;
      },
      &path);
  if (path.empty()) return nullptr;
  void* shim = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (shim == nullptr) return nullptr;
  void* found = dlsym(shim, name);
  dlclose(shim);
  return found;
}

class DlsymRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(check_mode());
    // What cudart does: RTLD_NOW, local scope.
    driver_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(driver_, nullptr) << dlerror();
    ASSERT_TRUE(routes::in_driver(symbol_of(dlsym(driver_, "cuDeviceGetCount"))))
        << "libcuda.so.1 is not simcuda's";
  }
  void TearDown() override {
    if (driver_ != nullptr) dlclose(driver_);
  }

  template <typename Function>
  Function find(const char* name) {
    return reinterpret_cast<Function>(dlsym(driver_, name));
  }

  void* driver_ = nullptr;
};

// libcuda.so.1 is loaded RTLD_LOCAL, as cudart loads it, so the global scope has no driver
// function, with or without the shim: the shim's own exports do not show through it.
TEST_F(DlsymRoutes, TheGlobalScopeHasNoDriverFunctions) {
  for (const char* name : {"cuDeviceGetCount", "cuMemAlloc_v2", "cuGetProcAddress_v2"}) {
    const void* global = dlsym(RTLD_DEFAULT, name);
    EXPECT_EQ(global, nullptr) << name << ": " << symbol_of(global).library;
  }
}

TEST_F(DlsymRoutes, HookedExportsComeBackAsTheShimsHooks) {
  ASSERT_FALSE(hooked_exports().empty());
  for (const std::string& name : hooked_exports()) {
    SCOPED_TRACE(name);
    void* found = dlsym(driver_, name.c_str());
    ASSERT_NE(found, nullptr) << dlerror();
    EXPECT_TRUE(is_export(found, name, under_shim()));
    if (under_shim()) {
      EXPECT_EQ(found, shim_definition(name.c_str()));
    }
    // Asking twice gives the same pointer (cudart caches; a second lookup must agree).
    EXPECT_EQ(found, dlsym(driver_, name.c_str()));
  }
}

TEST_F(DlsymRoutes, OtherExportsStayTheDrivers) {
  // Not hooked at all, and the legacy 32-bit ABIs the shim does not hook whose names lack the
  // _v2 of hooked ones: handing out a hook for the current ABI there would break the caller's
  // arguments. (The 32-bit cuMemAlloc, cuMemAllocPitch and cuMemFree have hooks of their own.)
  for (const char* name :
       {"cuDeviceGetCount", "cuDeviceGet", "cuCtxGetDevice", "cuMemHostGetFlags",
        "cuMemGetAddressRange", "cuMemHostGetDevicePointer_v2", "cuStreamSynchronize",
        "cuMemPoolGetAttribute", "cuMemSetAccess",
        "cuMemGetInfo", "cuArrayCreate", "cuArray3DCreate", "cuMemcpyHtoD", "cuGetExportTable"}) {
    SCOPED_TRACE(name);
    void* found = dlsym(driver_, name);
    ASSERT_NE(found, nullptr) << dlerror();
    EXPECT_TRUE(is_export(found, name, /*from_shim=*/false));
  }
}

TEST_F(DlsymRoutes, UnknownNamesStayUnknown) {
  // Names starting with "cu" take the shim's C++ path; what the driver lacks stays missing.
  for (const char* name : {"cuNoSuchFunction", "cu", "cuda_not_a_driver_function"}) {
    SCOPED_TRACE(name);
    dlerror();
    EXPECT_EQ(dlsym(driver_, name), nullptr);
    EXPECT_NE(dlerror(), nullptr);
  }
}

TEST_F(DlsymRoutes, TheBudgetHoldsThroughDlsymPointers) {
  const auto init = find<decltype(&cuInit)>("cuInit");
  const auto device_get = find<decltype(&cuDeviceGet)>("cuDeviceGet");
  const auto retain = find<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  const auto release = find<decltype(&cuDevicePrimaryCtxRelease)>("cuDevicePrimaryCtxRelease_v2");
  const auto set_current = find<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
  const auto alloc = find<decltype(&cuMemAlloc)>("cuMemAlloc_v2");
  const auto free = find<decltype(&cuMemFree)>("cuMemFree_v2");
  const auto get_info = find<decltype(&cuMemGetInfo)>("cuMemGetInfo_v2");
  const auto alloc_managed = find<decltype(&cuMemAllocManaged)>("cuMemAllocManaged");
  ASSERT_TRUE(init && device_get && retain && release && set_current && alloc && free &&
              get_info && alloc_managed);

  ASSERT_CU(init(0));
  CUdevice device = 0;
  CUcontext context = nullptr;
  ASSERT_CU(device_get(&device, 0));
  ASSERT_CU(retain(&context, device));
  ASSERT_CU(set_current(context));

  size_t free_bytes = 0;
  size_t total = 0;
  ASSERT_CU(get_info(&free_bytes, &total));
  EXPECT_EQ(total, under_shim() ? kBudget : kDeviceMemory);
  EXPECT_EQ(free_bytes, total);

  CUdeviceptr big = 0;
  CUdeviceptr managed = 0;
  if (under_shim()) {
    EXPECT_EQ(alloc(&big, 512 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(alloc_managed(&managed, 512 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  } else {
    ASSERT_CU(alloc(&big, 512 * kMiB));
    ASSERT_CU(free(big));
    ASSERT_CU(alloc_managed(&managed, 512 * kMiB, CU_MEM_ATTACH_GLOBAL));
    ASSERT_CU(free(managed));
  }
  CUdeviceptr small = 0;
  ASSERT_CU(alloc(&small, 128 * kMiB));
  ASSERT_CU(get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total - 128 * kMiB);
  ASSERT_CU(free(small));
  ASSERT_CU(get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total);
  EXPECT_CU(release(device));
}

}  // namespace
