#include "hooks/hook_table.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "driver/driver_functions.h"
#include "driver/undeclared_exports.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"

namespace vramspill::hooks {
namespace {

struct Hook {
  const char* export_name;
  void* hook;
};

// Within the shim, &cuMemAlloc_v2 is the shim's own definition: it links with
// -Bsymbolic-functions, so references bind inside the library whatever else is loaded.
const Hook kHooks[] = {
#define VRAMSPILL_HOOK_ENTRY(name) {#name, reinterpret_cast<void*>(&::name)},
    VRAMSPILL_HOOKED_FUNCTIONS(VRAMSPILL_HOOK_ENTRY)
#undef VRAMSPILL_HOOK_ENTRY
};

}  // namespace

void* hook_for_driver_function(void* function) {
  // The export's name is the one name dladdr gives for the address: the driver has one
  // function per export. Anything not from a library named libcuda is left alone.
  Dl_info info{};
  if (function == nullptr || dladdr(function, &info) == 0 || info.dli_sname == nullptr ||
      info.dli_saddr != function || info.dli_fname == nullptr ||
      std::strstr(info.dli_fname, "libcuda.so") == nullptr)
    return function;
  const auto hook = std::find_if(std::begin(kHooks), std::end(kHooks), [&](const Hook& candidate) {
    return std::strcmp(candidate.export_name, info.dli_sname) == 0;
  });
  if (hook == std::end(kHooks)) return function;
  // A runtime looking up driver functions is where a CUDA process starts (cudart does all its
  // lookups before cuInit), so this is the shim's first hooked call: entering initialises the
  // configuration and the log. Lookups happen once per function, so this costs nothing later;
  // the debug log is how one checks that a runtime ended up holding the hooks.
  const Entry entry;
  logging::debug("handing out the hook for {}", hook->export_name);
  return hook->hook;
}

}  // namespace vramspill::hooks
