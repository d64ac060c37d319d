// cuGetProcAddress, both ABIs: the way the CUDA runtime (static or shared), PyTorch's
// cudaGetDriverEntryPoint and most frameworks reach the driver (shim/README.md, "Interception").
//
// The real lookup runs first, so the driver's own rules decide which export answers a
// (name, version, flags) triple, including its per-thread (_ptsz/_ptds) variants; the shim then
// swaps in its hook for exactly that export: cuMemAlloc at version 2000 gets the hook of the
// 32-bit cuMemAlloc, never that of cuMemAlloc_v2, and a lookup for an ABI the shim does not hook
// (cuArrayCreate at version 2000) keeps the driver's pointer. The pointers handed
// out for "cuGetProcAddress" itself are the shim's hooks too, so later lookups through them
// (cudaGetDriverEntryPoint) are seen as well.
#include "hooks/hook.h"
#include "hooks/hook_table.h"

namespace {

CUresult substitute_hook(CUresult result, void** pfn) {
  if (result == CUDA_SUCCESS && pfn != nullptr)
    *pfn = vramspill::hooks::hook_for_driver_function(*pfn);
  return result;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn,
                                                 int cudaVersion, cuuint64_t flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGetProcAddress);
  return substitute_hook(real(symbol, pfn, cudaVersion, flags), pfn);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn,
                                                    int cudaVersion, cuuint64_t flags,
                                                    CUdriverProcAddressQueryResult* symbolStatus) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGetProcAddress_v2);
  return substitute_hook(real(symbol, pfn, cudaVersion, flags, symbolStatus), pfn);
}
