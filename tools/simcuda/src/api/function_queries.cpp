// What can be asked of a function (cuFunc*) or a kernel (cuKernel*) once found: parameter info,
// name, module, attributes, cache preference, loading state.
//
// The cuKernel* calls take a CUkernel only. cuFuncGetParamInfo takes a CUfunction only: the
// driver refuses a CUkernel there with CUDA_ERROR_INVALID_HANDLE (measured). The other cuFunc*
// calls also take a CUkernel, for which they answer as for the function cuKernelGetFunction gives
// (Note [Functions and kernels] in core/loaded_code.h).
#include "core/api.h"
#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/loaded_code.h"

using simcuda::Function;
using simcuda::Kernel;
using simcuda::KernelDef;
using simcuda::SettableAttributes;

namespace {

// The function a cuFunc* call other than cuFuncGetParamInfo acts on, or nullptr. Caller holds
// lock_loaded_code().
Function* function_acted_on(const void* handle) {
  if (Function* function = simcuda::live_function(handle)) return function;
  const Kernel* kernel = simcuda::live_kernel(handle);
  return kernel != nullptr ? kernel->function : nullptr;
}

CUresult param_info(const KernelDef& kernel, size_t index, size_t* offset, size_t* size) {
  if (index >= kernel.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = simcuda::param_offset(kernel, index);
  if (size != nullptr) *size = kernel.params[index].size;
  return CUDA_SUCCESS;
}

int compute_capability(const simcuda::Device& device) {
  const auto& attributes = device.attributes();
  return attributes.get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).value_or(9) * 10 +
         attributes.get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).value_or(0);
}

// The values of a small kernel compiled for the device, with what the program set.
CUresult get_attribute(int* value, CUfunction_attribute attribute, const SettableAttributes& set,
                       const simcuda::Device& device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = 16;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *value = compute_capability(device);
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = set.max_dynamic_shared_bytes.value_or(48 * 1024);
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *value = set.shared_carveout.value_or(-1);
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      *value = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult set_attribute(CUfunction_attribute attribute, int value, SettableAttributes& set,
                       const simcuda::Device& device) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
      const int limit = device.attributes()
                            .get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                            .value_or(0);
      if (value < 0 || value > limit) return CUDA_ERROR_INVALID_VALUE;
      set.max_dynamic_shared_bytes = value;
      return CUDA_SUCCESS;
    }
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      set.shared_carveout = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return CUDA_SUCCESS;  // accepted; there are no clusters to configure in simcuda
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// A function's attributes on `device`: its own (cuFuncSetAttribute) over its kernel's there
// (cuKernelSetAttribute), as cuda.h documents. Caller holds lock_loaded_code().
SettableAttributes function_attributes(const Function& function, const simcuda::Device& device) {
  return function.kernel != nullptr
             ? function.attributes.over(function.kernel->attributes_on(device.ordinal()))
             : function.attributes;
}

// cuFuncGet/SetAttribute ask about the current context's device.
simcuda::Device* current_device() {
  simcuda::Context* context = simcuda::current_context();
  return context != nullptr ? context->device : nullptr;
}

}  // namespace

// --- Parameters and names ---------------------------------------------------------------------

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex,
                                                   size_t* paramOffset, size_t* paramSize) {
  SIMCUDA_ENTER("cuFuncGetParamInfo");
  const auto lock = simcuda::lock_loaded_code();
  const Function* function = simcuda::live_function(func);  // a CUkernel is refused
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return param_info(*function->definition, paramIndex, paramOffset, paramSize);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex,
                                                     size_t* paramOffset, size_t* paramSize) {
  SIMCUDA_ENTER("cuKernelGetParamInfo");
  const auto lock = simcuda::lock_loaded_code();
  const Kernel* found = simcuda::live_kernel(kernel);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return param_info(*found->definition, paramIndex, paramOffset, paramSize);
}

// Names live in the static kernel table: valid for the life of the process.
SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  SIMCUDA_ENTER("cuFuncGetName");
  return simcuda::answer_about(name, hfunc, function_acted_on,
                               [](const Function& function) { return function.definition->name; });
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  SIMCUDA_ENTER("cuKernelGetName");
  return simcuda::answer_about(name, hfunc, simcuda::live_kernel,
                               [](const Kernel& kernel) { return kernel.definition->name; });
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  SIMCUDA_ENTER("cuFuncGetModule");
  return simcuda::answer_about(hmod, hfunc, function_acted_on, [](const Function& function) {
    return reinterpret_cast<CUmodule>(function.module);
  });
}

// --- Attributes -------------------------------------------------------------------------------

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib,
                                                   CUfunction hfunc) {
  SIMCUDA_ENTER("cuFuncGetAttribute");
  const simcuda::Device* device = current_device();
  if (device == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const auto lock = simcuda::lock_loaded_code();
  const Function* function = function_acted_on(hfunc);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return get_attribute(pi, attrib, function_attributes(*function, *device), *device);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib,
                                                   int value) {
  SIMCUDA_ENTER("cuFuncSetAttribute");
  const simcuda::Device* device = current_device();
  if (device == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const auto lock = simcuda::lock_loaded_code();
  Function* function = function_acted_on(hfunc);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return set_attribute(attrib, value, function->attributes, *device);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib,
                                                     CUkernel kernel, CUdevice dev) {
  SIMCUDA_ENTER("cuKernelGetAttribute");
  const simcuda::Device* device = simcuda::Driver::instance()->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const auto lock = simcuda::lock_loaded_code();
  const Kernel* found = simcuda::live_kernel(kernel);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // The kernel's own value: cuFuncSetAttribute on its function does not show here.
  return get_attribute(pi, attrib, found->attributes_on(dev), *device);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val,
                                                     CUkernel kernel, CUdevice dev) {
  SIMCUDA_ENTER("cuKernelSetAttribute");
  const simcuda::Device* device = simcuda::Driver::instance()->device(dev);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const auto lock = simcuda::lock_loaded_code();
  Kernel* found = simcuda::live_kernel(kernel);
  if (found == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return set_attribute(attrib, val, found->per_device[dev], *device);
}

// --- Cache preference and loading -------------------------------------------------------------

// A preference only; simcuda has no caches.
SIMCUDA_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache /*config*/) {
  SIMCUDA_ENTER("cuFuncSetCacheConfig");
  const auto lock = simcuda::lock_loaded_code();
  return function_acted_on(hfunc) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache /*config*/,
                                                       CUdevice dev) {
  SIMCUDA_ENTER("cuKernelSetCacheConfig");
  if (simcuda::Driver::instance()->device(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const auto lock = simcuda::lock_loaded_code();
  return simcuda::live_kernel(kernel) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  SIMCUDA_ENTER("cuFuncIsLoaded");
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  if (function_acted_on(function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;  // nothing is ever loaded lazily
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncLoad(CUfunction function) {
  SIMCUDA_ENTER("cuFuncLoad");
  const auto lock = simcuda::lock_loaded_code();
  return function_acted_on(function) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
