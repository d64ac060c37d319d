// Modules and libraries: loading, unloading, and finding their functions and kernels by name.
// Launches are in api/launch.cpp; what can be asked of a function or kernel once found
// (attributes, parameter info, name) is in api/function_queries.cpp.
//
// simcuda has no ISA, so every image loads (core/kernels.h): each module holds one function, and
// each library one kernel, per entry of the kernel table (Note [Functions and kernels] in
// core/loaded_code.h). Images are not read; a file must merely be readable.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/api.h"
#include "core/context.h"
#include "core/loaded_code.h"

using simcuda::Function;
using simcuda::Kernel;
using simcuda::Library;
using simcuda::Module;

namespace {

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
  simcuda::add_module(*module);
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
  simcuda::add_library(*library);
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
    module = simcuda::live_module(hmod);
    if (module == nullptr || module->library != nullptr) return CUDA_ERROR_INVALID_HANDLE;
    simcuda::remove_module(*module);
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
  Module* module = simcuda::live_module(hmod);
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Function* function = module->function(name);
  if (function == nullptr) return CUDA_ERROR_NOT_FOUND;
  *hfunc = reinterpret_cast<CUfunction>(function);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  SIMCUDA_ENTER("cuModuleGetFunctionCount");
  return simcuda::answer_about(count, mod, simcuda::live_module, [](const Module& module) {
    return static_cast<unsigned int>(module.functions.size());
  });
}

SIMCUDA_EXPORT CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction* functions,
                                                           unsigned int numFunctions,
                                                           CUmodule mod) {
  SIMCUDA_ENTER("cuModuleEnumerateFunctions");
  if (functions == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Module* module = simcuda::live_module(mod);
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < module->functions.size() && i < numFunctions; ++i)
    functions[i] = reinterpret_cast<CUfunction>(&module->functions[i]);
  return CUDA_SUCCESS;
}

// The table holds kernels only: there are no __device__ variables to find.
SIMCUDA_EXPORT CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* /*dptr*/, size_t* /*bytes*/,
                                                     CUmodule hmod, const char* name) {
  SIMCUDA_ENTER("cuModuleGetGlobal_v2");
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  return simcuda::live_module(hmod) == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_NOT_FOUND;
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
    found = simcuda::live_library(library);
    if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    simcuda::remove_library(*found);
  }
  delete found;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library,
                                                   const char* name) {
  SIMCUDA_ENTER("cuLibraryGetKernel");
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Library* found = simcuda::live_library(library);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Kernel* kernel = found->kernel(name);
  if (kernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  *pKernel = reinterpret_cast<CUkernel>(kernel);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  SIMCUDA_ENTER("cuLibraryGetKernelCount");
  return simcuda::answer_about(count, lib, simcuda::live_library, [](const Library& found) {
    return static_cast<unsigned int>(found.kernels.size());
  });
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels,
                                                          unsigned int numKernels, CUlibrary lib) {
  SIMCUDA_ENTER("cuLibraryEnumerateKernels");
  if (kernels == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  Library* found = simcuda::live_library(lib);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < found->kernels.size() && i < numKernels; ++i)
    kernels[i] = reinterpret_cast<CUkernel>(&found->kernels[i]);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  SIMCUDA_ENTER("cuLibraryGetModule");
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return simcuda::answer_about(pMod, library, simcuda::live_library, [](Library& found) {
    return reinterpret_cast<CUmodule>(&found.module);
  });
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  SIMCUDA_ENTER("cuKernelGetFunction");
  if (simcuda::current_context() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Its function in the library's module, which serves every context (Note [Functions and
  // kernels] in core/loaded_code.h).
  return simcuda::answer_about(pFunc, kernel, simcuda::live_kernel, [](const Kernel& found) {
    return reinterpret_cast<CUfunction>(found.function);
  });
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  SIMCUDA_ENTER("cuKernelGetLibrary");
  return simcuda::answer_about(pLib, kernel, simcuda::live_kernel, [](const Kernel& found) {
    return reinterpret_cast<CUlibrary>(found.library);
  });
}
