// The C library's dlsym, which the shim's own dlsym override (hooks/dlsym_entry.S) replaces for
// everyone else. The driver table resolves through it, and so does the override for names that
// are not the driver's.
#pragma once

namespace vramspill::driver {

using DlsymFunction = void* (*)(void*, const char*);

// glibc's dlsym, found with dlvsym(RTLD_NEXT, ...) so that the lookup cannot land in the shim.
DlsymFunction real_dlsym();

}  // namespace vramspill::driver
