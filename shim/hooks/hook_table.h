// Which of the driver's functions the shim replaces, by the function's address.
#pragma once

namespace vramspill::hooks {

// `function` is a pointer the real driver handed out (through dlsym or cuGetProcAddress). If it
// is one of libcuda.so.1's exports the shim hooks, returns the hook for exactly that export (so
// the caller keeps the ABI it asked for); otherwise returns `function` unchanged.
void* hook_for_driver_function(void* function);

}  // namespace vramspill::hooks
