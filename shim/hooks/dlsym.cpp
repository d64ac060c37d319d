// The C++ side of the dlsym override (Note [Why dlsym starts in assembly]): driver names looked
// up in libcuda.so.1 come back as the shim's hooks, so programs that dlopen the driver and dlsym
// its exports (the CUDA runtime's fallback, NCCL, frameworks' own loaders) reach the shim.
#include <dlfcn.h>

#include <cstring>

#include "driver/real_driver.h"
#include "hooks/hook_table.h"
#include "driver/real_dlsym.h"

// Driver names (every name, should the real dlsym not be found). The real dlsym answers as it
// would have; a driver export it found in libcuda.so.1 that the shim hooks is replaced by the
// hook. Lookups through RTLD_NEXT/RTLD_DEFAULT are answered relative to the shim, not the
// caller: for driver names that only matters to another driver interposer loaded after vramspill.
extern "C" __attribute__((visibility("hidden"))) void* vramspill_dlsym_driver_symbol(
    void* handle, const char* symbol) {
  vramspill::driver::DlsymFunction real = vramspill::driver::real_dlsym();
  if (real == nullptr) return nullptr;
  void* found = real(handle, symbol);
  if (found == nullptr || symbol == nullptr || std::strncmp(symbol, "cu", 2) != 0) return found;
  // The global scope finds the shim's own export first. Without the shim it would have found
  // the next definition, or none at all when libcuda is not loaded (or only RTLD_LOCAL, as the
  // runtime loads it): answer null then, as the process would have seen without the preload.
  if (handle == RTLD_DEFAULT && vramspill::driver::is_own_address(found) &&
      real(RTLD_NEXT, symbol) == nullptr)
    return nullptr;
  return vramspill::hooks::hook_for_driver_function(found);
}
