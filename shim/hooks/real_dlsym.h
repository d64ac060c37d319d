// The C library's dlsym, which the shim's own dlsym override (hooks/dlsym_entry.S) replaces for
// everyone else.
#pragma once

namespace vramspill::hooks {

using DlsymFunction = void* (*)(void*, const char*);

// glibc's dlsym, found with dlvsym(RTLD_NEXT, ...) so that the lookup cannot land in the shim.
DlsymFunction real_dlsym();

}  // namespace vramspill::hooks
