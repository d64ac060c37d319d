// What the CUDA runtime does to reach the driver (shim/README.md, "Interception"): dlopen
// libcuda.so.1, dlsym "cuGetProcAddress_v2" once, the "" probe, "cuGetProcAddress" itself at 11030
// and 12000 (the pointers cudaGetDriverEntryPoint later uses), then every entry point by (name,
// version, flags). The program does not link libcuda.
//
// Under the shim (ROUTES_EXPECT=shim) each lookup must answer the shim's hook for exactly the
// export the driver picks (dladdr: that export's name, in libvramspill.so) when the shim hooks
// it, and the driver's own function otherwise: a lookup for an older ABI (cuMemAlloc at 2000,
// the 32-bit one) must never get the hook of another ABI. Without the
// preload (ROUTES_EXPECT=driver) every answer is the driver's, with the same export names.
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "driver/driver_functions.h"
#include "routes_support.h"

namespace {

using routes::check_mode;
using routes::is_export;
using routes::kBudget;
using routes::kDeviceMemory;
using routes::kMiB;
using routes::under_shim;

using GetProcAddressV1 = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t);
using GetProcAddressV2 = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t,
                                            CUdriverProcAddressQueryResult*);

constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;  // 2

bool is_hooked(const std::string& export_name) {
  static const std::set<std::string> hooked = {
#define ROUTES_NAME(name) #name,
      VRAMSPILL_HOOKED_FUNCTIONS(ROUTES_NAME)
#undef ROUTES_NAME
  };
  return hooked.contains(export_name);
}

// One line of tests/data/cudart-13.0.88-driver-lookups.txt: what the real driver answered.
struct Lookup {
  std::string name;
  int version = 0;
  cuuint64_t flags = 0;
  std::string export_name;  // empty: not found
};

// Parses `cuGetProcAddress_v2("cuMemAlloc", ver=3020, flags=0) -> cuMemAlloc_v2` (or
// `-> <not found>`); false for any other line. (No std::regex: GCC 12 warns inside it under ASan.)
bool parse_lookup(const std::string& line, Lookup& out) {
  const std::string_view text(line);
  const size_t open = text.find("(\"");
  if (!text.starts_with("cuGetProcAddress") || open == std::string_view::npos) return false;
  const size_t close = text.find('"', open + 2);
  if (close == std::string_view::npos) return false;
  int version = 0;
  unsigned long long flags = 0;
  int consumed = 0;
  if (std::sscanf(line.c_str() + close + 1, ", ver=%d, flags=%llu) -> %n", &version, &flags,
                  &consumed) != 2 ||
      consumed == 0)
    return false;
  const std::string_view answer = text.substr(close + 1 + static_cast<size_t>(consumed));
  out.name = std::string(text.substr(open + 2, close - open - 2));
  out.version = version;
  out.flags = flags;
  out.export_name = answer == "<not found>" ? std::string() : std::string(answer);
  return !answer.empty();
}

std::vector<Lookup> read_lookup_table() {
  std::vector<Lookup> lookups;
  std::ifstream file(ROUTES_LOOKUP_TABLE);
  std::string line;
  while (std::getline(file, line)) {
    Lookup lookup;
    if (parse_lookup(line, lookup)) lookups.push_back(std::move(lookup));
  }
  return lookups;
}

class ProcAddressRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(check_mode());
    driver_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(driver_, nullptr) << dlerror();
    // cudart's one dlsym.
    get_proc_address_ = reinterpret_cast<GetProcAddressV2>(dlsym(driver_, "cuGetProcAddress_v2"));
    ASSERT_TRUE(is_export(reinterpret_cast<void*>(get_proc_address_), "cuGetProcAddress_v2",
                          under_shim()));
  }
  void TearDown() override {
    if (driver_ != nullptr) dlclose(driver_);
  }

  // A lookup through the pointer cudart got from dlsym. It succeeds whether or not the driver
  // has the function (a real driver answers so: tools/simcuda/README.md, "Fidelity"); `status`
  // says which.
  void* look_up(const char* name, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult expected_status = CU_GET_PROC_ADDRESS_SUCCESS) {
    void* function = reinterpret_cast<void*>(0x1);
    CUdriverProcAddressQueryResult status{};
    EXPECT_EQ(get_proc_address_(name, &function, version, flags, &status), CUDA_SUCCESS)
        << name << "@" << version << " flags " << flags;
    EXPECT_EQ(status, expected_status) << name << "@" << version << " flags " << flags;
    return function;
  }

  // Expects the lookup to answer `export_name`: the shim's hook when the shim hooks it and is
  // loaded, the driver's function otherwise.
  void expect_answer(const char* name, int version, cuuint64_t flags,
                     const std::string& export_name) {
    SCOPED_TRACE(std::string(name) + "@" + std::to_string(version) + " flags " +
                 std::to_string(flags));
    void* function = look_up(name, version, flags);
    EXPECT_TRUE(is_export(function, export_name, under_shim() && is_hooked(export_name)));
  }

  void* driver_ = nullptr;
  GetProcAddressV2 get_proc_address_ = nullptr;
};

TEST_F(ProcAddressRoutes, TheEmptyProbeIsNotFound) {
  // cudart's probe: a driver answers it (no function of that name), where the toolkit's stub
  // library's CUDA_ERROR_STUB_LIBRARY would send cudart to dlsym.
  EXPECT_EQ(look_up("", 0, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND), nullptr);
  EXPECT_EQ(look_up("cuNoSuchFunction", 12000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND), nullptr);
  // A function newer than the version asked for: the shim hands out no hook either.
  EXPECT_EQ(look_up("cuStreamGetDevice", 12000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
            nullptr);
}

TEST_F(ProcAddressRoutes, GetProcAddressItselfIsWrapped) {
  expect_answer("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
  expect_answer("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
  expect_answer("cuGetProcAddress", 12000, kPerThread, "cuGetProcAddress_v2");
}

// Every hooked allocation function at the version cudart asks for it, with flags 0 and 2: the
// per-thread exports exist for the stream-ordered ones only.
TEST_F(ProcAddressRoutes, AllocationLookupsAnswerTheHookForTheExactExport) {
  struct Expected {
    const char* name;
    int version;
    const char* legacy_stream;  // flags 0
    const char* per_thread;     // flags 2
  };
  const Expected expected[] = {
      {"cuInit", 2000, "cuInit", "cuInit"},
      {"cuMemAlloc", 3020, "cuMemAlloc_v2", "cuMemAlloc_v2"},
      {"cuMemAllocPitch", 3020, "cuMemAllocPitch_v2", "cuMemAllocPitch_v2"},
      {"cuMemAllocManaged", 6000, "cuMemAllocManaged", "cuMemAllocManaged"},
      {"cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
      {"cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync",
       "cuMemAllocFromPoolAsync_ptsz"},
      {"cuMemFree", 3020, "cuMemFree_v2", "cuMemFree_v2"},
      {"cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
      {"cuMemCreate", 10020, "cuMemCreate", "cuMemCreate"},
      {"cuMemRelease", 10020, "cuMemRelease", "cuMemRelease"},
      {"cuMemGetInfo", 3020, "cuMemGetInfo_v2", "cuMemGetInfo_v2"},
      {"cuArrayCreate", 3020, "cuArrayCreate_v2", "cuArrayCreate_v2"},
      {"cuArray3DCreate", 3020, "cuArray3DCreate_v2", "cuArray3DCreate_v2"},
      {"cuArrayDestroy", 2000, "cuArrayDestroy", "cuArrayDestroy"},
      // A newer requested version keeps the newest ABI at or below it.
      {"cuMemAlloc", 13000, "cuMemAlloc_v2", "cuMemAlloc_v2"},
      {"cuMemAllocAsync", 13000, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
  };
  for (const Expected& each : expected) {
    expect_answer(each.name, each.version, 0, each.legacy_stream);
    expect_answer(each.name, each.version, kPerThread, each.per_thread);
  }
}

// The 32-bit ABIs at version 2000 answer their own exports, never the shim's _v2 (whose arguments
// differ): the shim's 32-bit hooks for the allocation functions, the driver's for the rest.
TEST_F(ProcAddressRoutes, LegacyAbisAnswerTheirOwnExports) {
  for (const char* name : {"cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemGetInfo",
                           "cuArrayCreate", "cuArray3DCreate"}) {
    expect_answer(name, 2000, 0, name);
    expect_answer(name, 2000, kPerThread, name);
  }
}

// Every lookup real cudart 13.0 makes, answered as the real driver answered it (through the shim's
// hook when the export is hooked).
TEST_F(ProcAddressRoutes, EveryLookupOfRealCudartAnswersTheSameExport) {
  const std::vector<Lookup> lookups = read_lookup_table();
  ASSERT_GT(lookups.size(), 300u) << ROUTES_LOOKUP_TABLE;
  std::set<std::string> hooked_answers;
  for (const Lookup& lookup : lookups) {
    if (lookup.export_name.empty()) {
      EXPECT_EQ(look_up(lookup.name.c_str(), lookup.version, lookup.flags,
                        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
                nullptr)
          << lookup.name;
      continue;
    }
    expect_answer(lookup.name.c_str(), lookup.version, lookup.flags, lookup.export_name);
    if (is_hooked(lookup.export_name)) hooked_answers.insert(lookup.export_name);
  }
  // The sweep covered the hooks cudart reaches (all but VMM, which it never looks up).
  for (const char* export_name :
       {"cuInit", "cuGetProcAddress", "cuGetProcAddress_v2", "cuMemAlloc_v2",
        "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
        "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", "cuMemFree_v2",
        "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemGetInfo_v2", "cuArrayCreate_v2",
        "cuArray3DCreate_v2", "cuArrayDestroy", "cuLaunchKernel_ptsz", "cuMemcpyHtoD_v2_ptds"})
    EXPECT_TRUE(hooked_answers.contains(export_name)) << export_name;
}

// cudaGetDriverEntryPoint looks up through the pointers cudart stored for "cuGetProcAddress":
// lookups through them are the shim's too, and so is the budget.
TEST_F(ProcAddressRoutes, LookupsThroughTheReturnedGetProcAddressAreHookedToo) {
  const auto v1 = reinterpret_cast<GetProcAddressV1>(look_up("cuGetProcAddress", 11030, 0));
  const auto v2 = reinterpret_cast<GetProcAddressV2>(look_up("cuGetProcAddress", 12000, 0));
  ASSERT_NE(v1, nullptr);
  ASSERT_NE(v2, nullptr);

  void* function = nullptr;
  ASSERT_CU(v1("cuMemAlloc", &function, 12000, 0));
  EXPECT_TRUE(is_export(function, "cuMemAlloc_v2", under_shim()));
  ASSERT_CU(v1("cuMemAllocAsync", &function, 12000, kPerThread));
  EXPECT_TRUE(is_export(function, "cuMemAllocAsync_ptsz", under_shim()));
  ASSERT_CU(v1("cuMemAlloc", &function, 2000, 0));
  EXPECT_TRUE(is_export(function, "cuMemAlloc", under_shim()));  // the 32-bit hook
  // Frameworks reach VMM this way (cudart never looks it up itself).
  ASSERT_CU(v2("cuMemCreate", &function, 12000, 0, nullptr));
  EXPECT_TRUE(is_export(function, "cuMemCreate", under_shim()));
  ASSERT_CU(v2("cuMemRelease", &function, 12000, 0, nullptr));
  EXPECT_TRUE(is_export(function, "cuMemRelease", under_shim()));
  ASSERT_CU(v2("cuMemMap", &function, 12000, 0, nullptr));
  EXPECT_TRUE(is_export(function, "cuMemMap", under_shim()));
  ASSERT_CU(v2("cuMemSetAccess", &function, 12000, 0, nullptr));
  EXPECT_TRUE(is_export(function, "cuMemSetAccess", /*from_shim=*/false));
  // Lookups of cuGetProcAddress through the wrapped one stay wrapped.
  ASSERT_CU(v2("cuGetProcAddress", &function, 12000, 0, nullptr));
  EXPECT_TRUE(is_export(function, "cuGetProcAddress_v2", under_shim()));
  ASSERT_CU(v1("cuGetProcAddress", &function, 11030, 0));
  EXPECT_TRUE(is_export(function, "cuGetProcAddress", under_shim()));
}

TEST_F(ProcAddressRoutes, TheBudgetHoldsThroughLookedUpPointers) {
  const auto v2 = reinterpret_cast<GetProcAddressV2>(look_up("cuGetProcAddress", 12000, 0));
  ASSERT_NE(v2, nullptr);
  const auto get = [&](const char* name, cuuint64_t flags = 0) {
    void* function = nullptr;
    EXPECT_CU(v2(name, &function, 12000, flags, nullptr)) << name;
    return function;
  };
  const auto init = reinterpret_cast<decltype(&cuInit)>(get("cuInit"));
  const auto device_get = reinterpret_cast<decltype(&cuDeviceGet)>(get("cuDeviceGet"));
  const auto retain =
      reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(get("cuDevicePrimaryCtxRetain"));
  const auto release =
      reinterpret_cast<decltype(&cuDevicePrimaryCtxRelease)>(get("cuDevicePrimaryCtxRelease"));
  const auto set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(get("cuCtxSetCurrent"));
  const auto alloc = reinterpret_cast<decltype(&cuMemAlloc)>(get("cuMemAlloc"));
  const auto free = reinterpret_cast<decltype(&cuMemFree)>(get("cuMemFree"));
  const auto get_info = reinterpret_cast<decltype(&cuMemGetInfo)>(get("cuMemGetInfo"));
  const auto alloc_async =
      reinterpret_cast<decltype(&cuMemAllocAsync)>(get("cuMemAllocAsync", kPerThread));
  const auto free_async =
      reinterpret_cast<decltype(&cuMemFreeAsync)>(get("cuMemFreeAsync", kPerThread));
  const auto synchronize =
      reinterpret_cast<decltype(&cuStreamSynchronize)>(get("cuStreamSynchronize", kPerThread));
  ASSERT_TRUE(init && device_get && retain && release && set_current && alloc && free &&
              get_info && alloc_async && free_async && synchronize);

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

  CUdeviceptr big_sync = 0;
  CUdeviceptr big_async = 0;
  const CUresult sync_result = alloc(&big_sync, 512 * kMiB);
  const CUresult async_result = alloc_async(&big_async, 512 * kMiB, nullptr);
  if (under_shim()) {
    EXPECT_EQ(sync_result, CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(async_result, CUDA_ERROR_OUT_OF_MEMORY);
  } else {
    ASSERT_CU(sync_result);
    ASSERT_CU(async_result);
    ASSERT_CU(free(big_sync));
    ASSERT_CU(free_async(big_async, nullptr));
    ASSERT_CU(synchronize(nullptr));
  }
  ASSERT_CU(get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total);

  CUdeviceptr small = 0;
  ASSERT_CU(alloc_async(&small, 100 * kMiB, nullptr));
  ASSERT_CU(get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total - 100 * kMiB);
  ASSERT_CU(free_async(small, nullptr));
  ASSERT_CU(synchronize(nullptr));
  ASSERT_CU(get_info(&free_bytes, &total));
  EXPECT_EQ(free_bytes, total);
  EXPECT_CU(release(device));
}

}  // namespace
