// simcuda's entry-point lookup, seen the way a CUDA program sees it: this test links the
// toolkit's stub libcuda.so, and ctest puts simcuda first on LD_LIBRARY_PATH, so every cu* call
// below goes to the simulated driver. No test calls cuInit: all of this must work before it.
//
// Every answer is checked against the address of the named export in the loaded driver
// (dlsym on its handle): cuGetProcAddress must return exactly the function the real driver would
// name, never a neighbouring ABI.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// A function with a driver export's name, exported by this executable (ENABLE_EXPORTS), so that
// it comes before libcuda in the global symbol lookup order, as the vramspill shim does under
// LD_PRELOAD. See the NotInterposable test.
extern "C" __attribute__((visibility("default"))) int cuProfilerStart(void) { return 12345; }

namespace {

void* driver_handle() {
  // Already loaded (this test links libcuda.so.1); dlopen only hands out its handle.
  static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return handle;
}

void* export_address(const std::string& export_name) {
  return dlsym(driver_handle(), export_name.c_str());
}

struct Answer {
  CUresult result = CUDA_ERROR_UNKNOWN;
  void* pfn = reinterpret_cast<void*>(1);  // a lookup must overwrite it, found or not
  CUdriverProcAddressQueryResult status = static_cast<CUdriverProcAddressQueryResult>(-1);
};

Answer lookup(const char* name, int version, cuuint64_t flags) {
  Answer answer;
  answer.result = cuGetProcAddress_v2(name, &answer.pfn, version, flags, &answer.status);
  return answer;
}

// One line of tests/data/cudart-13.0.88-driver-lookups.txt:
//   cuGetProcAddress_v2("cuMemAlloc", ver=3020, flags=0) -> cuMemAlloc_v2
struct Expected {
  std::string name;
  int version = 0;
  cuuint64_t flags = 0;
  std::string export_name;  // empty: "<not found>"
};

bool parse_line(const std::string& line, Expected& out) {
  const std::string prefix = "cuGetProcAddress_v2(\"";
  if (line.rfind(prefix, 0) != 0) return false;
  const size_t name_end = line.find('"', prefix.size());
  if (name_end == std::string::npos) return false;
  out.name = line.substr(prefix.size(), name_end - prefix.size());
  unsigned long long flags = 0;
  char target[256] = {};
  if (std::sscanf(line.c_str() + name_end, "\", ver=%d, flags=%llu) -> %255s", &out.version, &flags,
                  target) != 3)
    return false;
  out.flags = flags;
  out.export_name = std::strcmp(target, "<not") == 0 ? "" : target;
  return true;
}

std::vector<Expected> cudart_lookups() {
  std::ifstream in(VRAMSPILL_TEST_DATA_DIR "/cudart-13.0.88-driver-lookups.txt");
  std::vector<Expected> lookups;
  for (std::string line; std::getline(in, line);) {
    Expected expected;
    if (parse_line(line, expected)) lookups.push_back(expected);
  }
  return lookups;
}

TEST(ProcAddress, SimulatedDriverIsTheOneLoaded) {
  ASSERT_NE(driver_handle(), nullptr) << dlerror();
  void* entry = export_address("cuGetProcAddress_v2");
  Dl_info info{};
  ASSERT_NE(dladdr(entry, &info), 0);
  EXPECT_NE(std::strstr(info.dli_fname, "simcuda/libcuda.so.1"), nullptr)
      << "loaded " << info.dli_fname << "; run through ctest, which sets LD_LIBRARY_PATH";
  // The toolkit's stub answers the "" probe with CUDA_ERROR_STUB_LIBRARY; a driver must not.
  EXPECT_EQ(lookup("", 0, CU_GET_PROC_ADDRESS_DEFAULT).result, CUDA_SUCCESS);
}

struct Fact {
  const char* name;
  int version;
  cuuint64_t flags;
  const char* export_name;
};

// Curated facts about the driver ABI: which export each (name, version, flags) must resolve to.
constexpr Fact kFacts[] = {
    // The 32-bit ABI of CUDA 2.0 and the 64-bit one of 3.2 are different functions.
    {"cuMemAlloc", 2000, 0, "cuMemAlloc"},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemAlloc", 3020, 2, "cuMemAlloc_v2"},   // no per-thread ABI: the legacy one
    {"cuMemAlloc", 99999, 0, "cuMemAlloc_v2"},  // newer than the driver: its newest ABI
    {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
    {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
    {"cuMemcpyHtoD", 7000, 2, "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyHtoD", 7000, 0, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 7000, 1, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 3020, 2, "cuMemcpyHtoD_v2"},  // per-thread ABIs start at 7000
    {"cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"},
    {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
    {"cuCtxCreate", 2000, 0, "cuCtxCreate"},
    {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
    {"cuCtxCreate", 11000, 0, "cuCtxCreate_v2"},
    {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
    {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
    // cuda.h renames cuGraphInstantiate to cuGraphInstantiateWithFlags; the export is still _v2.
    {"cuGraphInstantiate", 10000, 0, "cuGraphInstantiate"},
    {"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"},
    // Same name, different signature (CUdevice vs CUmemLocation).
    {"cuMemAdvise", 8000, 0, "cuMemAdvise"},
    {"cuMemAdvise", 12020, 0, "cuMemAdvise_v2"},
    // cuda.h's `#define cuStreamGetCtx __CUDA_API_PTSZ(cuStreamGetCtx)` only adds the
    // per-thread suffix; the 12050 ABI (with a green context) is cuStreamGetCtx_v2.
    {"cuStreamGetCtx", 9020, 0, "cuStreamGetCtx"},
    {"cuStreamGetCtx", 12050, 0, "cuStreamGetCtx_v2"},
    {"cuStreamGetCtx", 12050, 2, "cuStreamGetCtx_v2_ptsz"},
    {"cuStreamBeginCapture", 10000, 2, "cuStreamBeginCapture_ptsz"},
    {"cuStreamBeginCapture", 10010, 2, "cuStreamBeginCapture_v2_ptsz"},
    {"cuProfilerInitialize", 4000, 0, "cuProfilerInitialize"},  // from cudaProfilerTypedefs.h
    {"cuGetExportTable", 3000, 0, "cuGetExportTable"},
};

TEST(ProcAddress, CuratedFacts) {
  for (const Fact& fact : kFacts) {
    SCOPED_TRACE(std::string(fact.name) + "@" + std::to_string(fact.version) +
                 " flags=" + std::to_string(fact.flags));
    const Answer answer = lookup(fact.name, fact.version, fact.flags);
    EXPECT_EQ(answer.result, CUDA_SUCCESS);
    EXPECT_EQ(answer.status, CU_GET_PROC_ADDRESS_SUCCESS);
    void* expected = export_address(fact.export_name);
    ASSERT_NE(expected, nullptr) << "simcuda does not export " << fact.export_name;
    EXPECT_EQ(answer.pfn, expected) << "expected " << fact.export_name;
  }
}

// No ABI-compatible function is an answer, not an error: CUDA_SUCCESS, a null pointer, and the
// reason in symbolStatus. Measured on an H200 (driver 580, CUDA 13.0) for an unknown name and for
// cuStreamGetDevice at 12000; the documentation says the same of every such lookup.
TEST(ProcAddress, UnknownNamesAndOldVersions) {
  for (const char* name : {"", "cuNoSuchFunction", "cudaMalloc"}) {
    SCOPED_TRACE(name);
    const Answer answer = lookup(name, 13000, 0);
    EXPECT_EQ(answer.result, CUDA_SUCCESS);
    EXPECT_EQ(answer.status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    EXPECT_EQ(answer.pfn, nullptr);
  }
  // cuStreamGetDevice exists from 12080 on, cuMemCreate from 10020 on.
  for (const auto& [name, introduced] :
       {std::pair{"cuStreamGetDevice", 12080}, std::pair{"cuMemCreate", 10020}}) {
    SCOPED_TRACE(name);
    for (const cuuint64_t flags :
         {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
      const Answer too_old = lookup(name, introduced - 80, flags);
      EXPECT_EQ(too_old.result, CUDA_SUCCESS);
      EXPECT_EQ(too_old.status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
      EXPECT_EQ(too_old.pfn, nullptr);
    }
    const Answer introduced_then = lookup(name, introduced, 0);
    EXPECT_EQ(introduced_then.status, CU_GET_PROC_ADDRESS_SUCCESS);
    EXPECT_EQ(introduced_then.pfn, export_address(name));
  }
}

TEST(ProcAddress, ArgumentChecks) {
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", nullptr, 3020, 0, &status), CUDA_ERROR_INVALID_VALUE);
  void* pfn = reinterpret_cast<void*>(1);
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &pfn, 3020, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(pfn, nullptr);
  // symbolStatus is optional.
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 3020, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pfn, export_address("cuMemAlloc_v2"));
  // Without it, a missing function still answers CUDA_SUCCESS and a null pointer.
  EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchFunction", &pfn, 3020, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pfn, nullptr);
  pfn = reinterpret_cast<void*>(1);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemCreate", &pfn, 10000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pfn, nullptr);
  // Undefined flag bits, or both stream modes at once.
  EXPECT_EQ(lookup("cuMemAlloc", 3020, 4).result, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(lookup("cuMemAlloc", 3020, 3).result, CUDA_ERROR_INVALID_VALUE);
}

TEST(ProcAddress, ReturnedGetProcAddressPointersWork) {
  // cudart looks up cuGetProcAddress at 11030 and 12000 and serves cudaGetDriverEntryPoint
  // through the pointers it gets: both must be working lookups of their own ABI.
  const Answer v1 = lookup("cuGetProcAddress", 11030, 0);
  ASSERT_EQ(v1.result, CUDA_SUCCESS);
  const Answer v2 = lookup("cuGetProcAddress", 12000, 0);
  ASSERT_EQ(v2.result, CUDA_SUCCESS);

  void* pfn = nullptr;
  auto get_v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(v1.pfn);
  ASSERT_EQ(get_v1("cuMemAlloc", &pfn, 3020, CU_GET_PROC_ADDRESS_DEFAULT), CUDA_SUCCESS);
  EXPECT_EQ(pfn, export_address("cuMemAlloc_v2"));
  ASSERT_EQ(get_v1("cuMemAllocAsync", &pfn, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            CUDA_SUCCESS);
  EXPECT_EQ(pfn, export_address("cuMemAllocAsync_ptsz"));
  // The 11.3 ABI has no symbolStatus; a missing function is CUDA_SUCCESS and a null pointer.
  pfn = reinterpret_cast<void*>(1);
  EXPECT_EQ(get_v1("cuMemCreate", &pfn, 10000, 0), CUDA_SUCCESS);
  EXPECT_EQ(pfn, nullptr);
  pfn = reinterpret_cast<void*>(1);
  EXPECT_EQ(get_v1("cuNoSuchFunction", &pfn, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(pfn, nullptr);

  auto get_v2 = reinterpret_cast<PFN_cuGetProcAddress_v12000>(v2.pfn);
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(get_v2("cuCtxCreate", &pfn, 11040, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(pfn, export_address("cuCtxCreate_v3"));
  // And around again: the pointer it returns for itself is itself.
  ASSERT_EQ(get_v2("cuGetProcAddress", &pfn, 12000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(pfn, v2.pfn);
}

TEST(ProcAddress, NotInterposable) {
  // This executable exports its own cuProfilerStart, found before libcuda's in the global
  // scope. The driver still hands out its own, as the real one does; otherwise the shim,
  // preloaded, would be given its own hooks back.
  const Answer answer = lookup("cuProfilerStart", 4000, 0);
  ASSERT_EQ(answer.result, CUDA_SUCCESS);
  EXPECT_EQ(answer.pfn, export_address("cuProfilerStart"));
  EXPECT_NE(answer.pfn, reinterpret_cast<void*>(&cuProfilerStart));
}

TEST(ProcAddress, EveryCudartLookupResolvesToTheNamedExport) {
  const std::vector<Expected> lookups = cudart_lookups();
  ASSERT_EQ(lookups.size(), 440U) << "tests/data/cudart-13.0.88-driver-lookups.txt";
  for (const Expected& expected : lookups) {
    SCOPED_TRACE(expected.name + "@" + std::to_string(expected.version) +
                 " flags=" + std::to_string(expected.flags));
    const Answer answer = lookup(expected.name.c_str(), expected.version, expected.flags);
    if (expected.export_name.empty()) {
      EXPECT_EQ(answer.result, CUDA_SUCCESS);
      EXPECT_NE(answer.status, CU_GET_PROC_ADDRESS_SUCCESS);
      EXPECT_EQ(answer.pfn, nullptr);
      continue;
    }
    EXPECT_EQ(answer.result, CUDA_SUCCESS);
    void* address = export_address(expected.export_name);
    ASSERT_NE(address, nullptr) << "simcuda does not export " << expected.export_name;
    EXPECT_EQ(answer.pfn, address) << "expected " << expected.export_name;
  }
}

TEST(ProcAddress, ConcurrentLookupsAgree) {
  // cudart initialises once, but frameworks look entry points up from many threads.
  struct Resolved {
    Expected lookup;
    void* pfn;
  };
  std::vector<Resolved> resolved;
  for (const Expected& expected : cudart_lookups())
    resolved.push_back(
        {expected, lookup(expected.name.c_str(), expected.version, expected.flags).pfn});
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  threads.reserve(mismatches.size());
  for (int& count : mismatches) {
    threads.emplace_back([&resolved, &count] {
      for (int round = 0; round < 20; ++round)
        for (const Resolved& r : resolved)
          if (lookup(r.lookup.name.c_str(), r.lookup.version, r.lookup.flags).pfn != r.pfn) ++count;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int count : mismatches) EXPECT_EQ(count, 0);
}

TEST(ProcAddress, LookupLog) {
  char path[] = "/tmp/simcuda_lookup_log_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  setenv("SIMCUDA_LOOKUP_LOG", path, 1);
  lookup("cuMemAlloc", 3020, 0);
  lookup("cuMemcpyHtoD", 7000, 2);
  lookup("", 0, 0);
  void* pfn = nullptr;
  auto get_v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(export_address("cuGetProcAddress"));
  get_v1("cuCtxCreate", &pfn, 11040, 0);
  unsetenv("SIMCUDA_LOOKUP_LOG");
  lookup("cuMemFree", 3020, 0);  // not logged any more

  std::ifstream in(path);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  EXPECT_EQ(log,
            "cuGetProcAddress_v2(\"cuMemAlloc\", ver=3020, flags=0) -> cuMemAlloc_v2\n"
            "cuGetProcAddress_v2(\"cuMemcpyHtoD\", ver=7000, flags=2) -> cuMemcpyHtoD_v2_ptds\n"
            "cuGetProcAddress_v2(\"\", ver=0, flags=0) -> <not found>\n"
            "cuGetProcAddress(\"cuCtxCreate\", ver=11040, flags=0) -> cuCtxCreate_v3\n");
}

TEST(ErrorNames, NamesAndStrings) {
  const char* text = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  ASSERT_EQ(cuGetErrorName(CUDA_SUCCESS, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_SUCCESS");
  ASSERT_EQ(cuGetErrorString(CUDA_SUCCESS, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "no error");
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_NOT_SUPPORTED");

  // Not a CUresult: INVALID_VALUE and a null string, as the driver answers.
  const auto bogus = static_cast<CUresult>(9999);
  text = "unchanged";
  EXPECT_EQ(cuGetErrorName(bogus, &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
  text = "unchanged";
  EXPECT_EQ(cuGetErrorString(bogus, &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(ErrorNames, EveryKnownCodeHasANameAndAString) {
  int known = 0;
  for (int code = 0; code < 1100; ++code) {
    const char* name = nullptr;
    if (cuGetErrorName(static_cast<CUresult>(code), &name) != CUDA_SUCCESS) continue;
    ++known;
    SCOPED_TRACE(name);
    EXPECT_EQ(std::strncmp(name, "CUDA_", 5), 0);
    const char* text = nullptr;
    ASSERT_EQ(cuGetErrorString(static_cast<CUresult>(code), &text), CUDA_SUCCESS);
    EXPECT_GT(std::strlen(text), 0U);
  }
  EXPECT_GT(known, 90);  // cuda.h 13.0 has 101
}

TEST(DriverVersion, IsTheToolkitVersion) {
  int version = 0;
  ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, CUDA_VERSION);
  EXPECT_EQ(cuDriverGetVersion(nullptr), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
