// Pointers to the real driver's functions (Note [The driver table]).
//
// Note [Finding the real driver]
// The CUDA runtime dlopen()s libcuda.so.1 with RTLD_LOCAL, so dlsym(RTLD_NEXT, ...) from the
// preloaded shim cannot see it. The shim asks the dynamic linker for the already-loaded
// libcuda.so.1 (RTLD_NOLOAD: the shim never loads the driver itself; a hook only runs once
// someone loaded it) and looks each export up in that handle's own scope, where the preload is
// not. A result inside libvramspill.so itself (a driver that resolves through the global scope)
// is rejected: calling it would recurse.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "driver/driver_functions.h"
#include "driver/undeclared_exports.h"

namespace vramspill::driver {

struct RealDriver {
#define VRAMSPILL_DECLARE_SLOT(name) std::atomic<decltype(&::name)> name{nullptr};
  VRAMSPILL_DRIVER_FUNCTIONS(VRAMSPILL_DECLARE_SLOT)
#undef VRAMSPILL_DECLARE_SLOT
};

// Constant-initialised (atomics of nullptr): no constructor runs when the library loads.
// Inline so that every hook reads its slot directly.
inline constinit RealDriver real_table;
inline RealDriver& real_driver() { return real_table; }

// What find_real_function() found of `name` in the loaded libcuda.so.1 (Note [Finding the real
// driver]): null when the driver is not loaded, lacks the export, or the lookup found the shim.
struct FoundFunction {
  void* function = nullptr;
  bool driver_loaded = false;  // false: nothing to cache, someone may load the driver later
};
FoundFunction find_real_function(const char* name);

// True when `address` is code of libvramspill.so itself.
bool is_own_address(const void* address);

// Note [Exports the driver lacks]
// Older drivers lack exports the hooks look up on hot paths (cuStreamGetDevice before 12.8 on
// every stream-ordered allocation, cuFuncGetParamInfo and cuKernelGetParamInfo before 12.4 on
// every tracked launch). A lookup is a dlopen, a dlsym and a dlclose, each under the dynamic
// loader's lock, which threads loading modules (Triton, torch.compile) hold for long: an export
// the loaded driver lacks is marked so, and never looked up again.
template <typename Function>
Function lacked_export() {
  return reinterpret_cast<Function>(uintptr_t{1});  // no function's address
}

// The real function, resolved once and then read with one relaxed load; nullptr while the driver
// is not loaded, and for good once the loaded one lacks it.
template <typename Function>
Function resolve(std::atomic<Function>& slot, const char* name) {
  Function function = slot.load(std::memory_order_relaxed);
  if (function == nullptr) [[unlikely]] {
    const FoundFunction found = find_real_function(name);
    function = found.function != nullptr ? reinterpret_cast<Function>(found.function)
               : found.driver_loaded     ? lacked_export<Function>()
                                         : nullptr;
    slot.store(function, std::memory_order_relaxed);
  }
  return function == lacked_export<Function>() ? nullptr : function;
}

}  // namespace vramspill::driver

// VRAMSPILL_REAL(cuMemAlloc_v2) is the real driver's cuMemAlloc_v2, or nullptr.
#define VRAMSPILL_REAL(name) \
  (::vramspill::driver::resolve(::vramspill::driver::real_driver().name, #name))
