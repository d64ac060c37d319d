// Handles of loaded code: modules and their functions (CUmodule, CUfunction), libraries and their
// kernels (CUlibrary, CUkernel). api/module.cpp loads, unloads and finds them; api/launch.cpp
// launches them and api/function_queries.cpp answers questions about them.
//
// Note [Functions and kernels]
// The driver has two handles for one kernel of the image. A CUfunction belongs to a module
// loaded in a context (cuModuleGetFunction). A CUkernel belongs to a library, which no context
// owns (cuLibraryGetKernel); cuKernelGetFunction gives the CUfunction that stands for it in the
// current context. cudart loads its fatbins as libraries and launches the CUkernel handles,
// passed to cuLaunchKernel as the CUfunction: every kernel of PyTorch and cuBLAS is launched so.
// The driver tells the two apart (measured on an H200; tools/simcuda/README.md, "Fidelity"):
// cuFuncGetParamInfo refuses a CUkernel with CUDA_ERROR_INVALID_HANDLE, while
// cuKernelGetParamInfo reads it and cuFuncGetParamInfo reads the function cuKernelGetFunction
// gives. A simulator that let one handle pass for the other hid exactly that from the shim, so:
// - A Kernel and a Function are distinct objects. A Library holds one Module (cuLibraryGetModule)
//   and one Kernel per entry of the kernel table; each Kernel names the Function of its entry in
//   that module, which is what cuKernelGetFunction answers. simcuda's modules are not tied to
//   contexts, so that one Function serves every context.
// - Every launch call takes either handle, as the driver documents and does. The cuKernel* calls
//   take only a CUkernel, and cuFuncGetParamInfo only a CUfunction. The other cuFunc* calls take
//   a CUkernel too: their documentation is silent, so simcuda keeps answering for the kernel.
// - Attributes a program sets: cuKernelSetAttribute sets a kernel's value for one device, and
//   cuKernelGetAttribute reads that back. cuFuncSetAttribute on a function overrides it for that
//   function, whichever call came first (cuda.h documents both rules).
// - Unloading a module or library ends its handles: each later use is CUDA_ERROR_INVALID_HANDLE
//   (handles from the program are checked against the live ones before they are followed).
//   Launches already queued refer to the static kernel table only, so they still run.
#pragma once

#include <cuda.h>

#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "core/kernels.h"

namespace simcuda {

struct Kernel;
struct Library;
struct Module;

// The attributes a program may set (cuFuncSetAttribute, cuKernelSetAttribute); an unset one
// reads as the layer below it, and finally as the driver's default.
struct SettableAttributes {
  std::optional<int> max_dynamic_shared_bytes;  // default 48 KiB, the limit without opting in
  std::optional<int> shared_carveout;           // default -1, no preference

  // These values, with `below`'s where these are unset.
  SettableAttributes over(const SettableAttributes& below) const;
};

struct Function {
  const KernelDef* definition = nullptr;
  Module* module = nullptr;
  Kernel* kernel = nullptr;       // the library kernel it stands for; none in a cuModuleLoad module
  SettableAttributes attributes;  // cuFuncSetAttribute
};

struct Module {
  explicit Module(Library* owner);
  Module(const Module&) = delete;  // its functions point back at it
  Module& operator=(const Module&) = delete;

  Function* function(std::string_view name);  // nullptr when the table has no such kernel

  Library* const library;           // a library's module goes with the library, never on its own
  std::vector<Function> functions;  // one per kernel table entry; never resized
};

struct Kernel {
  const KernelDef* definition = nullptr;
  Library* library = nullptr;
  Function* function = nullptr;  // its function in the library's module (cuKernelGetFunction)
  std::map<int, SettableAttributes> per_device;  // cuKernelSetAttribute, by device ordinal

  SettableAttributes attributes_on(int device) const;
};

struct Library {
  Library();
  Library(const Library&) = delete;  // its module and kernels point back at it
  Library& operator=(const Library&) = delete;

  Kernel* kernel(std::string_view name);  // nullptr when the table has no such kernel

  Module module{this};
  std::vector<Kernel> kernels;  // one per kernel table entry; never resized
};

// The lock that guards every live module, library, function and kernel and their attributes.
// The functions below that take or return these objects need the caller to hold it, and to
// keep holding it while it uses what they return.
std::unique_lock<std::mutex> lock_loaded_code();

void add_module(Module& module);  // with its functions
void remove_module(Module& module);
void add_library(Library& library);  // with its module, functions and kernels
void remove_library(Library& library);

// The live object a program's handle names, or nullptr for anything else: another kind of
// handle, an unloaded one, or garbage.
Module* live_module(const void* handle);
Library* live_library(const void* handle);
Function* live_function(const void* handle);
Kernel* live_kernel(const void* handle);

// What a launch of `handle` runs: a live CUfunction's or CUkernel's table entry, or nullptr.
// Takes the lock itself. The entry is static, so queued work stays valid after an unload.
const KernelDef* launch_definition(const void* handle);

// The shape of most queries of loaded code: `*out = answer(object)` for the live object that
// `find` (live_module, live_kernel, ...) gives for `handle`. A null `out` is
// CUDA_ERROR_INVALID_VALUE, a handle of no live object CUDA_ERROR_INVALID_HANDLE. Takes the lock.
template <typename Out, typename Object, typename Answer>
CUresult answer_about(Out* out, const void* handle, Object* (*find)(const void*), Answer answer) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = lock_loaded_code();
  Object* object = find(handle);
  if (object == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = answer(*object);
  return CUDA_SUCCESS;
}

}  // namespace simcuda
