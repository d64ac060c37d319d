// glibc's dlsym, found once (Note [Why dlsym starts in assembly] in hooks/dlsym_entry.S).
#include "driver/real_dlsym.h"

#include <dlfcn.h>

// Read by the assembly entry; set once the real dlsym is known.
extern "C" {
__attribute__((visibility("hidden"))) vramspill::driver::DlsymFunction
    vramspill_real_dlsym_pointer = nullptr;
}

namespace vramspill::driver {

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

}  // namespace vramspill::driver

// Called by the assembly entry on the first call of a non-driver name, so that it can then jump
// to glibc's dlsym with the caller's return address in place.
extern "C" __attribute__((visibility("hidden"), no_sanitize("thread")))
vramspill::driver::DlsymFunction
vramspill_resolve_real_dlsym() {
  return vramspill::driver::real_dlsym();
}

