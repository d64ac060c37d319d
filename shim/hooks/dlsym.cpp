// The C++ side of the dlsym override (Note [Why dlsym starts in assembly]): driver names looked
// up in libcuda.so.1 come back as the shim's hooks, so programs that dlopen the driver and dlsym
// its exports (the CUDA runtime's fallback, NCCL, frameworks' own loaders) reach the shim.
#include <dlfcn.h>

#include <cstring>

#include "driver/real_driver.h"
#include "hooks/hook_table.h"
#include "hooks/real_dlsym.h"

// Read by the assembly entry; set once the real dlsym is known.
extern "C" {
__attribute__((visibility("hidden"))) vramspill::hooks::DlsymFunction
    vramspill_real_dlsym_pointer = nullptr;
}

namespace vramspill::hooks {

// Not instrumented by ThreadSanitizer (nor vramspill_resolve_real_dlsym below): the TSan runtime
// looks up its interceptors' targets with dlsym(RTLD_NEXT, ...) while it initialises, which
// reaches this path, and TSan's instrumentation crashes when it runs before that is done.
__attribute__((no_sanitize("thread"))) DlsymFunction real_dlsym() {
  DlsymFunction function = __atomic_load_n(&vramspill_real_dlsym_pointer, __ATOMIC_ACQUIRE);
  if (function != nullptr) return function;
  // dlvsym is not overridden, so this cannot come back to the shim.
  void* found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (found == nullptr) found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  function = reinterpret_cast<DlsymFunction>(found);
  __atomic_store_n(&vramspill_real_dlsym_pointer, function, __ATOMIC_RELEASE);
  return function;
}

}  // namespace vramspill::hooks

// Called by the assembly entry on the first call of a non-driver name, so that it can then jump
// to glibc's dlsym with the caller's return address in place.
extern "C" __attribute__((visibility("hidden"), no_sanitize("thread")))
vramspill::hooks::DlsymFunction
vramspill_resolve_real_dlsym() {
  return vramspill::hooks::real_dlsym();
}

// Driver names (every name, should the real dlsym not be found). The real dlsym answers as it
// would have; a driver export it found in libcuda.so.1 that the shim hooks is replaced by the
// hook. Lookups through RTLD_NEXT/RTLD_DEFAULT are answered relative to the shim, not the
// caller: for driver names that only matters to another driver interposer loaded after vramspill.
extern "C" __attribute__((visibility("hidden"))) void* vramspill_dlsym_driver_symbol(
    void* handle, const char* symbol) {
  vramspill::hooks::DlsymFunction real = vramspill::hooks::real_dlsym();
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
