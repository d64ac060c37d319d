#include "driver/real_driver.h"

#include <dlfcn.h>

#include "driver/real_dlsym.h"

namespace vramspill::driver {

bool is_own_address(const void* address) {
  Dl_info own{};
  Dl_info other{};
  static const int anchor = 0;
  if (dladdr(&anchor, &own) == 0 || dladdr(address, &other) == 0) return false;
  return own.dli_fbase == other.dli_fbase;
}

FoundFunction find_real_function(const char* name) {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr) return {};
  void* function = real_dlsym()(driver, name);
  dlclose(driver);  // drops only the reference RTLD_NOLOAD took
  if (function != nullptr && is_own_address(function)) function = nullptr;
  return {.function = function, .driver_loaded = true};
}

}  // namespace vramspill::driver
