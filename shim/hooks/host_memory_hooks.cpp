// The program's own page-locked host memory counts against [spill] host_limit (shim/README.md,
// "Budgets and honesty"): pinned bytes are host memory the kernel cannot reclaim, whoever pinned
// them, so spills get less room while the program holds them. The program's pinning is never
// refused here: without vramspill it would succeed, and the limit exists to keep the shim's own
// spilling from pushing the host over.
#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

void count_pinned(CUresult result, const void* address, uint64_t bytes) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr || result != CUDA_SUCCESS || address == nullptr) return;
  uint64_t replaced = 0;
  if (!shim->program_pinned.add(reinterpret_cast<uint64_t>(address), bytes, &replaced)) return;
  shim->host_budget.charge(bytes);
  // The memory last pinned at this address was freed with its context, unseen: its bytes go.
  shim->host_budget.release(replaced);
}

// Forgets the memory before the driver's free (another thread may pin the same address at once)
// and gives its bytes back after; a refused free leaves it counted.
template <typename Free>
CUresult uncount_pinned(const void* address, Free free) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return free();
  const auto key = reinterpret_cast<uint64_t>(address);
  const std::optional<uint64_t> bytes = shim->program_pinned.remove(key);
  const CUresult result = free();
  if (!bytes) return result;
  if (result == CUDA_SUCCESS) {
    shim->host_budget.release(*bytes);
  } else if (!shim->program_pinned.put_back(key, *bytes)) {
    shim->host_budget.release(*bytes);  // not tracked any more: stop counting it
  }
  return result;
}

}  // namespace

VRAMSPILL_HOOK CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemHostAlloc);
  const CUresult result = real(pp, bytesize, Flags);
  count_pinned(result, result == CUDA_SUCCESS ? *pp : nullptr, bytesize);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemAllocHost_v2);
  const CUresult result = real(pp, bytesize);
  count_pinned(result, result == CUDA_SUCCESS ? *pp : nullptr, bytesize);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize,
                                                     unsigned int Flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemHostRegister_v2);
  const CUresult result = real(p, bytesize, Flags);
  count_pinned(result, p, bytesize);
  return result;
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemFreeHost(void* p) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemFreeHost);
  return uncount_pinned(p, [&] { return real(p); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuMemHostUnregister(void* p) {
  VRAMSPILL_REAL_OR_RETURN(real, cuMemHostUnregister);
  return uncount_pinned(p, [&] { return real(p); });
}
