#include "core/loaded_code.h"

#include <unordered_set>

namespace simcuda {
namespace {

std::mutex loaded_code_mutex;

// The live objects, guarded by loaded_code_mutex. Leaked, so that exit-time callers (static
// destructors of the program) still find them.
struct Live {
  std::unordered_set<const Module*> modules;
  std::unordered_set<const Library*> libraries;
  std::unordered_set<const Function*> functions;
  std::unordered_set<const Kernel*> kernels;
};
Live& live() {
  static auto* objects = new Live();
  return *objects;
}

// A handle is the address of its object; the sets say whether one is live, and of which kind.
template <typename T>
T* find_live(const std::unordered_set<const T*>& set, const void* handle) {
  auto* object = static_cast<const T*>(handle);
  return set.contains(object) ? const_cast<T*>(object) : nullptr;
}

}  // namespace

SettableAttributes SettableAttributes::over(const SettableAttributes& below) const {
  return {max_dynamic_shared_bytes ? max_dynamic_shared_bytes : below.max_dynamic_shared_bytes,
          shared_carveout ? shared_carveout : below.shared_carveout};
}

Module::Module(Library* owner) : library(owner) {
  const auto table = kernel_table();
  functions.reserve(table.size());
  for (const KernelDef& definition : table) {
    Function& function = functions.emplace_back();
    function.definition = &definition;
    function.module = this;
  }
}

Function* Module::function(std::string_view name) {
  for (Function& function : functions)
    if (name == function.definition->name) return &function;
  return nullptr;
}

SettableAttributes Kernel::attributes_on(int device) const {
  const auto found = per_device.find(device);
  return found != per_device.end() ? found->second : SettableAttributes{};
}

Library::Library() {
  kernels.reserve(module.functions.size());
  for (Function& function : module.functions) {
    Kernel& kernel = kernels.emplace_back();
    kernel.definition = function.definition;
    kernel.library = this;
    kernel.function = &function;
    function.kernel = &kernel;
  }
}

Kernel* Library::kernel(std::string_view name) {
  for (Kernel& kernel : kernels)
    if (name == kernel.definition->name) return &kernel;
  return nullptr;
}

std::unique_lock<std::mutex> lock_loaded_code() { return std::unique_lock(loaded_code_mutex); }

void add_module(Module& module) {
  live().modules.insert(&module);
  for (const Function& function : module.functions) live().functions.insert(&function);
}

void remove_module(Module& module) {
  live().modules.erase(&module);
  for (const Function& function : module.functions) live().functions.erase(&function);
}

void add_library(Library& library) {
  live().libraries.insert(&library);
  add_module(library.module);
  for (const Kernel& kernel : library.kernels) live().kernels.insert(&kernel);
}

void remove_library(Library& library) {
  live().libraries.erase(&library);
  remove_module(library.module);
  for (const Kernel& kernel : library.kernels) live().kernels.erase(&kernel);
}

Module* live_module(const void* handle) { return find_live(live().modules, handle); }
Library* live_library(const void* handle) { return find_live(live().libraries, handle); }
Function* live_function(const void* handle) { return find_live(live().functions, handle); }
Kernel* live_kernel(const void* handle) { return find_live(live().kernels, handle); }

const KernelDef* launch_definition(const void* handle) {
  const auto lock = lock_loaded_code();
  if (const Function* function = live_function(handle)) return function->definition;
  if (const Kernel* kernel = live_kernel(handle)) return kernel->definition;
  return nullptr;
}

}  // namespace simcuda
