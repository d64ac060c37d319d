// Driver functions that answer before cuInit: entry-point lookup (cuGetProcAddress, both ABIs),
// error names and strings, and the driver version.
//
// cudart dlopens libcuda.so.1, dlsyms cuGetProcAddress_v2 and then resolves ~440 driver
// functions through it before it ever calls cuInit (shim/README.md, "Interception"), so this is
// the first code of simcuda any CUDA program runs.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/api.h"
#include "core/error_names.h"
#include "core/proc_table.h"

namespace simcuda {
namespace {

// SIMCUDA_LOOKUP_LOG=path appends one line per lookup, in the format of
// tests/data/cudart-13.0.88-driver-lookups.txt, so a run can be compared with the real driver's
// answers. Plain open/write, reopened per line: this runs before anything is initialised (even
// inside other libraries' constructors), and one O_APPEND write per line keeps lines from
// concurrent threads whole.
void log_lookup(const char* entry_point, const char* symbol, int version, cuuint64_t flags,
                const char* export_name) {
  const char* path = std::getenv("SIMCUDA_LOOKUP_LOG");
  if (path == nullptr || *path == '\0') return;
  char line[512];
  const int length = std::snprintf(
      line, sizeof line, "%s(\"%.300s\", ver=%d, flags=%llu) -> %s\n", entry_point, symbol, version,
      static_cast<unsigned long long>(flags), export_name != nullptr ? export_name : "<not found>");
  if (length <= 0) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const size_t size =
      static_cast<size_t>(length) < sizeof line ? static_cast<size_t>(length) : sizeof line - 1;
  [[maybe_unused]] const ssize_t written = ::write(fd, line, size);
  ::close(fd);
}

CUdriverProcAddressQueryResult query_result(ProcLookupStatus status) {
  switch (status) {
    case ProcLookupStatus::kFound:
      return CU_GET_PROC_ADDRESS_SUCCESS;
    case ProcLookupStatus::kVersionNotSufficient:
      return CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    case ProcLookupStatus::kSymbolNotFound:
      break;
  }
  return CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
}

CUresult get_proc_address(const char* entry_point, const char* symbol, void** pfn, int cuda_version,
                          cuuint64_t flags, CUdriverProcAddressQueryResult* symbol_status) {
  if (pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (symbol == nullptr) return CUDA_ERROR_INVALID_VALUE;

  // 0 (CU_GET_PROC_ADDRESS_DEFAULT) means legacy stream here: "default" only becomes per-thread
  // when the caller's own headers are compiled for it, and then those headers pass 2 themselves
  // (cuda.h's cuGetProcAddress_v2_ptsz wrapper). The two modes exclude each other; other bits
  // are undefined. simcuda refuses what it cannot interpret rather than guess.
  constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != kLegacy && flags != kPerThread) {
    log_lookup(entry_point, symbol, cuda_version, flags, nullptr);
    return CUDA_ERROR_INVALID_VALUE;
  }

  // No ABI-compatible export is an answer, not an error: the driver returns CUDA_SUCCESS with
  // *pfn = NULL and says why in symbolStatus, as documented and as measured on an H200 (driver
  // 580, CUDA 13.0; tools/simcuda/README.md, "Fidelity"). Both ABIs answer alike; the 11.3 one
  // just has no symbolStatus to say why.
  const ProcLookup found = lookup_proc(symbol, cuda_version, flags == kPerThread);
  log_lookup(entry_point, symbol, cuda_version, flags, found.export_name);
  if (symbol_status != nullptr) *symbol_status = query_result(found.status);
  if (found.status == ProcLookupStatus::kFound) *pfn = found.address;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simcuda

// The CUDA 11.3 ABI, still exported and still handed out for lookups at 11030..11080.
SIMCUDA_EXPORT CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                 cuuint64_t flags) {
  SIMCUDA_ENTER_ANYTIME("cuGetProcAddress");
  return simcuda::get_proc_address("cuGetProcAddress", symbol, pfn, cudaVersion, flags, nullptr);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                    cuuint64_t flags,
                                                    CUdriverProcAddressQueryResult* symbolStatus) {
  SIMCUDA_ENTER_ANYTIME("cuGetProcAddress_v2");
  return simcuda::get_proc_address("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags,
                                   symbolStatus);
}

// Both answer CUDA_ERROR_INVALID_VALUE with *pStr = NULL for a code that is not a CUresult, as
// the driver does; callers print "unrecognized error code" themselves.
SIMCUDA_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  SIMCUDA_ENTER_ANYTIME("cuGetErrorName");
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const simcuda::ErrorName* known = simcuda::find_error(error);
  *pStr = known != nullptr ? known->name : nullptr;
  return known != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  SIMCUDA_ENTER_ANYTIME("cuGetErrorString");
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const simcuda::ErrorName* known = simcuda::find_error(error);
  *pStr = known != nullptr ? known->description : nullptr;
  return known != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// The version of the toolkit headers simcuda was built from (13000 for CUDA 13.0): the newest
// ABI its table knows, so cudart built with the same toolkit finds the driver sufficient.
SIMCUDA_EXPORT CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  SIMCUDA_ENTER_ANYTIME("cuDriverGetVersion");
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}
