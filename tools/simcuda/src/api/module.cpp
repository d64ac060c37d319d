// Modules and libraries: loading, unloading, and finding their functions and kernels by name.
// What can be asked of a function or kernel once found (attributes, parameter info, launches)
// is in api/launch.cpp.
//
// simcuda has no ISA, so every image loads (core/kernels.h): each module and library holds one
// function per entry of the kernel table. Images are not read; a file must merely be readable.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_set>

#include "core/api.h"
#include "core/context.h"
#include "core/kernels.h"

using simcuda::Function;

namespace {

struct Library;

struct Module {
  explicit Module(Library* owner) : library(owner) {
    const auto table = simcuda::kernel_table();
    function_count = table.size();
    functions = std::make_unique<Function[]>(function_count);
    for (size_t i = 0; i < function_count; ++i) {
      functions[i].kernel = &table[i];
      functions[i].module = this;
    }
  }
  std::span<Function> all_functions() { return {functions.get(), function_count}; }

  Library* library;  // a library's module is unloaded with the library, never on its own
  size_t function_count = 0;
  std::unique_ptr<Function[]> functions;
};

struct Library {
  Module module{this};
};

// The live modules and libraries, guarded by simcuda::lock_loaded_code() like the functions.
// Leaked so exit-time callers still find them.
struct Registry {
  std::unordered_set<const Module*> modules;
  std::unordered_set<const Library*> libraries;
};
Registry& registry() {
  static auto* instance = new Registry();
  return *instance;
}

// Callers hold the lock for these lookups and while using what they return.
Module* live_module(CUmodule handle) {
  auto* module = reinterpret_cast<Module*>(handle);
  return registry().modules.contains(module) ? module : nullptr;
}
Library* live_library(CUlibrary handle) {
  auto* library = reinterpret_cast<Library*>(handle);
  return registry().libraries.contains(library) ? library : nullptr;
}

void register_module(Module* module) {
  registry().modules.insert(module);
  simcuda::register_functions(module->all_functions());
}
void unregister_module(Module* module) {
  registry().modules.erase(module);
  simcuda::unregister_functions(module->all_functions());
}

Function* function_by_name(Module& module, const char* name) {
  for (Function& function : module.all_functions())
    if (std::string_view(name) == function.kernel->name) return &function;
  return nullptr;
}

// JIT options are accepted and ignored (there is nothing to compile); the outputs a program may
// read back are filled in: empty logs (a log buffer is written only when its size option says
// it has room) and no compile time.
CUresult apply_jit_options(unsigned int count, CUjit_option* options, void** values) {
  if (count == 0) return CUDA_SUCCESS;
  if (options == nullptr || values == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto has_room = [&](CUjit_option size_option) {
    for (unsigned int j = 0; j < count; ++j)
      if (options[j] == size_option && reinterpret_cast<uintptr_t>(values[j]) > 0) return true;
    return false;
  };
  for (unsigned int i = 0; i < count; ++i) {
    if (values[i] == nullptr) continue;
    if ((options[i] == CU_JIT_INFO_LOG_BUFFER && has_room(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)) ||
        (options[i] == CU_JIT_ERROR_LOG_BUFFER && has_room(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)))
      static_cast<char*>(values[i])[0] = '\0';
  }
  for (unsigned int i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ||
        options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_WALL_TIME)
      values[i] = nullptr;  // 0 bytes of log; 0.0f milliseconds
  }
  return CUDA_SUCCESS;
}

CUresult load_module(CUmodule* out, const void* image) {
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto* module = new Module(/*owner=*/nullptr);
  const auto lock = simcuda::lock_loaded_code();
  register_module(module);
  *out = reinterpret_cast<CUmodule>(module);
  return CUDA_SUCCESS;
}

CUresult load_library(CUlibrary* out, CUjit_option* jit_options, void** jit_values,
                      unsigned int jit_count, CUlibraryOption* library_options,
                      void** library_values, unsigned int library_count) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (library_count != 0 && (library_options == nullptr || library_values == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult result = apply_jit_options(jit_count, jit_options, jit_values);
      result != CUDA_SUCCESS)
    return result;
  auto* library = new Library();
  const auto lock = simcuda::lock_loaded_code();
  registry().libraries.insert(library);
  register_module(&library->module);
  *out = reinterpret_cast<CUlibrary>(library);
  return CUDA_SUCCESS;
}

bool file_readable(const char* path) {
  if (path == nullptr) return false;
  std::FILE* file = std::fopen(path, "rb");
  if (file == nullptr) return false;
  std::fclose(file);
  return true;
}

}  // namespace

// --- Modules ---------------------------------------------------------------------------------

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  SIMCUDA_ENTER("cuModuleLoad");
  if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!file_readable(fname)) return CUDA_ERROR_FILE_NOT_FOUND;
  return load_module(module, fname);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  SIMCUDA_ENTER("cuModuleLoadData");
  return load_module(module, image);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image,
                                                   unsigned int numOptions, CUjit_option* options,
                                                   void** optionValues) {
  SIMCUDA_ENTER("cuModuleLoadDataEx");
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult result = apply_jit_options(numOptions, options, optionValues);
      result != CUDA_SUCCESS)
    return result;
  return load_module(module, image);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  SIMCUDA_ENTER("cuModuleLoadFatBinary");
  return load_module(module, fatCubin);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  SIMCUDA_ENTER("cuModuleUnload");
  Module* module = nullptr;
  {
    const auto lock = simcuda::lock_loaded_code();
    module = live_module(hmod);
    if (module == nullptr || module->library != nullptr) return CUDA_ERROR_INVALID_HANDLE;
    unregister_module(module);
  }
  // Launches already queued copied their arguments and refer to the static kernel table only,
  // so they run to completion after the module is gone.
  delete module;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  SIMCUDA_ENTER("cuModuleGetLoadingMode");
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The driver loads lazily unless CUDA_MODULE_LOADING=EAGER (the default since CUDA 12.2).
  const char* setting = std::getenv("CUDA_MODULE_LOADING");
  const bool eager = setting != nullptr && std::strcmp(setting, "EAGER") == 0;
  *mode = eager ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod,
                                                    const char* name) {
  SIMCUDA_ENTER("cuModuleGetFunction");
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Module* module = live_module(hmod);
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Function* function = function_by_name(*module, name);
  if (function == nullptr) return CUDA_ERROR_NOT_FOUND;
  *hfunc = reinterpret_cast<CUfunction>(function);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  SIMCUDA_ENTER("cuModuleGetFunctionCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  const Module* module = live_module(mod);
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned int>(module->function_count);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction* functions,
                                                           unsigned int numFunctions,
                                                           CUmodule mod) {
  SIMCUDA_ENTER("cuModuleEnumerateFunctions");
  if (functions == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Module* module = live_module(mod);
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < module->function_count && i < numFunctions; ++i)
    functions[i] = reinterpret_cast<CUfunction>(&module->all_functions()[i]);
  return CUDA_SUCCESS;
}

// The table holds kernels only: there are no __device__ variables to find.
SIMCUDA_EXPORT CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* /*dptr*/, size_t* /*bytes*/,
                                                     CUmodule hmod, const char* name) {
  SIMCUDA_ENTER("cuModuleGetGlobal_v2");
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  return live_module(hmod) == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_NOT_FOUND;
}

// --- Libraries and kernels -------------------------------------------------------------------

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code,
                                                  CUjit_option* jitOptions, void** jitOptionsValues,
                                                  unsigned int numJitOptions,
                                                  CUlibraryOption* libraryOptions,
                                                  void** libraryOptionValues,
                                                  unsigned int numLibraryOptions) {
  SIMCUDA_ENTER("cuLibraryLoadData");
  if (code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return load_library(library, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                      libraryOptionValues, numLibraryOptions);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryLoadFromFile(
    CUlibrary* library, const char* fileName, CUjit_option* jitOptions, void** jitOptionsValues,
    unsigned int numJitOptions, CUlibraryOption* libraryOptions, void** libraryOptionValues,
    unsigned int numLibraryOptions) {
  SIMCUDA_ENTER("cuLibraryLoadFromFile");
  if (fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!file_readable(fileName)) return CUDA_ERROR_FILE_NOT_FOUND;
  return load_library(library, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                      libraryOptionValues, numLibraryOptions);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  SIMCUDA_ENTER("cuLibraryUnload");
  Library* found = nullptr;
  {
    const auto lock = simcuda::lock_loaded_code();
    found = live_library(library);
    if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    registry().libraries.erase(found);
    unregister_module(&found->module);
  }
  delete found;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library,
                                                   const char* name) {
  SIMCUDA_ENTER("cuLibraryGetKernel");
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Library* found = live_library(library);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Function* function = function_by_name(found->module, name);
  if (function == nullptr) return CUDA_ERROR_NOT_FOUND;
  *pKernel = reinterpret_cast<CUkernel>(function);  // also usable as a CUfunction
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  SIMCUDA_ENTER("cuLibraryGetKernelCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  const Library* found = live_library(lib);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned int>(found->module.function_count);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels,
                                                          unsigned int numKernels, CUlibrary lib) {
  SIMCUDA_ENTER("cuLibraryEnumerateKernels");
  if (kernels == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Library* found = live_library(lib);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const std::span<Function> functions = found->module.all_functions();
  for (size_t i = 0; i < functions.size() && i < numKernels; ++i)
    kernels[i] = reinterpret_cast<CUkernel>(&functions[i]);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  SIMCUDA_ENTER("cuLibraryGetModule");
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const auto lock = simcuda::lock_loaded_code();
  Library* found = live_library(library);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = reinterpret_cast<CUmodule>(&found->module);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  SIMCUDA_ENTER("cuKernelGetFunction");
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const auto lock = simcuda::lock_loaded_code();
  Function* function = simcuda::live_function(kernel);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = reinterpret_cast<CUfunction>(function);  // one function serves every context
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  SIMCUDA_ENTER("cuKernelGetLibrary");
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  const Function* function = simcuda::live_function(kernel);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Library* library = static_cast<Module*>(function->module)->library;
  if (library == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // a module's function, not a kernel
  *pLib = reinterpret_cast<CUlibrary>(library);
  return CUDA_SUCCESS;
}
