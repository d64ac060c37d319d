// Kernel launches (cuLaunchKernel, cuLaunchKernelEx and their per-thread-stream forms), and what
// can be asked of a function or kernel: parameter info, name, module, attributes.
//
// A launch copies its arguments (Note [Kernel parameters] in core/kernels.h) and queues work on
// the stream that checks that the context may reach the memory the kernel touches (Note [Peer
// access] in core/peer_access.h), accounts for that memory (the cost model; this also migrates
// managed pages to the device) and then runs the host implementation, guarded so that a fault
// poisons the context instead of killing the process (Note [Kernel faults] in
// core/kernel_fault.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "core/api.h"
#include "core/context.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/kernel_fault.h"
#include "core/kernels.h"
#include "core/peer_access.h"
#include "core/remap_check.h"
#include "core/submit.h"
#include "core/traffic.h"

using simcuda::Context;
using simcuda::Function;
using simcuda::KernelArgs;
using simcuda::KernelDef;

namespace {

// Modeled cost of getting one kernel started on the GPU (launch latency), charged to the stream
// on top of the memory traffic. A model figure, not a measurement.
constexpr double kModeledLaunchOverheadSeconds = 3e-6;

// Copies the arguments into the packed ABI layout. Exactly one of `params` and `extra` is given
// (a kernel without parameters may have neither).
CUresult pack_arguments(const KernelDef& kernel, void** params, void** extra,
                        std::vector<std::byte>& packed) {
  const size_t size = simcuda::param_buffer_size(kernel);
  packed.assign(size, std::byte{0});
  if (params == nullptr && extra == nullptr)
    return size == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr) {
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(packed.data() + simcuda::param_offset(kernel, i), params[i],
                  kernel.params[i].size);
    }
    return CUDA_SUCCESS;
  }
  const void* buffer = nullptr;
  const size_t* buffer_size = nullptr;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      buffer_size = static_cast<const size_t*>(extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (buffer == nullptr || buffer_size == nullptr || *buffer_size < size)
    return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(packed.data(), buffer, size);
  return CUDA_SUCCESS;
}

// The limits the driver checks; grid and block shape are otherwise ignored (the host
// implementations do the whole grid-stride loop).
bool valid_dimensions(unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                      unsigned int by, unsigned int bz) {
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return false;
  if (gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64) return false;
  return uint64_t{bx} * by * bz <= 1024;
}

struct KernelRun {
  const KernelDef* kernel;
  const KernelArgs* args;
  CUresult result;
};

// Runs under run_guarded: trivially destructible state only (a fault leaves by siglongjmp).
void run_body(void* data) {
  auto* run = static_cast<KernelRun*>(data);
  run->result = run->kernel->run(*run->args);
}

// The first address of the kernel's ranges that its context has no peer access to (Note [Peer
// access] in core/peer_access.h), or nullptr.
const void* address_without_peer_access(const std::vector<simcuda::MemoryRange>& ranges,
                                        const Context& context) {
  for (const simcuda::MemoryRange& range : ranges) {
    if (const std::optional<uint64_t> denied =
            simcuda::first_address_without_peer_access(context, range.address, range.size))
      return reinterpret_cast<const void*>(*denied);
  }
  return nullptr;
}

// The stream work of one launch; returns its modeled seconds. Launches are counted here, as they
// run, rather than at the call, so that each replay of a captured graph counts too.
double execute(const KernelDef& kernel, const KernelArgs& args, Context& context) {
  // A context that faulted runs no more kernels, as on a GPU.
  if (context.sticky_error.load(std::memory_order_relaxed) != CUDA_SUCCESS) return 0.0;
  context.device->counters().kernel_launches.fetch_add(1, std::memory_order_relaxed);
  double seconds = kModeledLaunchOverheadSeconds;
  const std::vector<simcuda::MemoryRange> ranges = kernel.touches(args);
  KernelRun run{&kernel, &args, CUDA_SUCCESS};
  // Another device's memory faults before the kernel moves a byte; a bad pointer when it runs.
  const char* illegal = nullptr;
  const void* fault_address = address_without_peer_access(ranges, context);
  if (fault_address != nullptr) {
    illegal = "another device's memory without peer access";
  } else {
    for (const simcuda::MemoryRange& range : ranges)
      seconds += simcuda::account_access(*context.device, simcuda::Engine::kKernel, range.address,
                                         range.size, range.access);
    void* unmapped = nullptr;
    if (!simcuda::run_guarded(run_body, &run, &unmapped)) {
      illegal = "unmapped";
      fault_address = unmapped;
      simcuda::check_touch_during_remap(kernel.name, reinterpret_cast<uint64_t>(unmapped));
    }
  }
  if (illegal != nullptr) {
    run.result = CUDA_ERROR_ILLEGAL_ADDRESS;
    // The driver reports nothing more; a line on stderr saves a debugging session.
    std::fprintf(stderr,
                 "simcuda: kernel %s touched address %p (%s): CUDA_ERROR_ILLEGAL_ADDRESS (the "
                 "context is now unusable)\n",
                 kernel.name, fault_address, illegal);
  }
  if (run.result != CUDA_SUCCESS) {
    CUresult expected = CUDA_SUCCESS;
    context.sticky_error.compare_exchange_strong(expected, run.result);
  }
  return seconds;
}

CUresult launch(simcuda::DefaultStream null_means, const void* function, unsigned int gx,
                unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                unsigned int /*shared_bytes*/, CUstream handle, void** params, void** extra) {
  simcuda::Stream* stream = nullptr;
  if (CUresult result = simcuda::resolve_stream(handle, null_means, &stream);
      result != CUDA_SUCCESS)
    return result;
  const KernelDef* kernel = simcuda::kernel_of_function(function);
  if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_dimensions(gx, gy, gz, bx, by, bz)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte> packed;
  if (CUresult result = pack_arguments(*kernel, params, extra, packed); result != CUDA_SUCCESS)
    return result;
  // Installed here, on the program's thread, rather than lazily on a worker.
  simcuda::install_fault_handler();
  Context* context = stream->context();
  // The work may be recorded by a stream capture and replayed later: it owns what it uses (the
  // kernel table is static; contexts outlive their streams' work).
  KernelArgs args(std::move(packed));
  simcuda::Footprint footprint{kernel->name, {}};
  for (const simcuda::MemoryRange& range : kernel->touches(args))
    footprint.ranges.push_back({range.address, range.size});
  return simcuda::submit_async(
      *stream,
      [kernel, args = std::move(args), context] { return execute(*kernel, args, *context); },
      nullptr, std::move(footprint));
}

CUresult launch_ex(simcuda::DefaultStream null_means, const CUlaunchConfig* config, CUfunction f,
                   void** params, void** extra) {
  if (config == nullptr || (config->numAttrs != 0 && config->attrs == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  // Launch attributes (clusters, priorities, programmatic serialisation) are accepted and have
  // no effect on the simulated device.
  return launch(null_means, f, config->gridDimX, config->gridDimY, config->gridDimZ,
                config->blockDimX, config->blockDimY, config->blockDimZ, config->sharedMemBytes,
                config->hStream, params, extra);
}

// --- Function queries --------------------------------------------------------------------------

CUresult param_info(const void* handle, size_t index, size_t* offset, size_t* size) {
  const KernelDef* kernel = simcuda::kernel_of_function(handle);
  if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= kernel->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = simcuda::param_offset(*kernel, index);
  if (size != nullptr) *size = kernel->params[index].size;
  return CUDA_SUCCESS;
}

CUresult function_name(const char** name, const void* handle) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const KernelDef* kernel = simcuda::kernel_of_function(handle);
  if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = kernel->name;  // static storage: valid for the life of the process
  return CUDA_SUCCESS;
}

int compute_capability(const simcuda::Device& device) {
  const auto& attributes = device.attributes();
  return attributes.get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).value_or(9) * 10 +
         attributes.get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).value_or(0);
}

// The values of a small kernel compiled for the device. Caller holds lock_loaded_code().
CUresult get_attribute(int* value, CUfunction_attribute attribute, const Function& function,
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
      *value = function.max_dynamic_shared_bytes;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *value = function.shared_carveout;
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

// Caller holds lock_loaded_code().
CUresult set_attribute(CUfunction_attribute attribute, int value, Function& function,
                       const simcuda::Device& device) {
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
      const int limit = device.attributes()
                            .get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                            .value_or(0);
      if (value < 0 || value > limit) return CUDA_ERROR_INVALID_VALUE;
      function.max_dynamic_shared_bytes = value;
      return CUDA_SUCCESS;
    }
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      function.shared_carveout = value;
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

// cuFuncGet/SetAttribute use the current context's device; cuKernel* name the device.
simcuda::Device* device_for(bool current, CUdevice ordinal) {
  if (!current) return simcuda::Driver::instance()->device(ordinal);
  Context* context = simcuda::current_context();
  return context != nullptr ? context->device : nullptr;
}

CUresult attribute(int* value, CUfunction_attribute attribute, const void* handle,
                   const simcuda::Device* device, CUresult no_device) {
  if (device == nullptr) return no_device;
  const auto lock = simcuda::lock_loaded_code();
  const Function* function = simcuda::live_function(handle);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return get_attribute(value, attribute, *function, *device);
}

CUresult change_attribute(CUfunction_attribute attribute, int value, const void* handle,
                          const simcuda::Device* device, CUresult no_device) {
  if (device == nullptr) return no_device;
  const auto lock = simcuda::lock_loaded_code();
  Function* function = simcuda::live_function(handle);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return set_attribute(attribute, value, *function, *device);
}

}  // namespace

// --- Launches ----------------------------------------------------------------------------------

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuLaunchKernel, cuLaunchKernel_ptsz, launch,
                               (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                void** extra),
                               f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra)

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, launch_ex,
                               (const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                void** extra),
                               config, f, kernelParams, extra)

// --- Functions and kernels ---------------------------------------------------------------------

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex,
                                                   size_t* paramOffset, size_t* paramSize) {
  SIMCUDA_ENTER("cuFuncGetParamInfo");
  return param_info(func, paramIndex, paramOffset, paramSize);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex,
                                                     size_t* paramOffset, size_t* paramSize) {
  SIMCUDA_ENTER("cuKernelGetParamInfo");
  return param_info(kernel, paramIndex, paramOffset, paramSize);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  SIMCUDA_ENTER("cuFuncGetName");
  return function_name(name, hfunc);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  SIMCUDA_ENTER("cuKernelGetName");
  return function_name(name, hfunc);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  SIMCUDA_ENTER("cuFuncGetModule");
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto lock = simcuda::lock_loaded_code();
  const Function* function = simcuda::live_function(hfunc);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *hmod = static_cast<CUmodule>(function->module);
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib,
                                                   CUfunction hfunc) {
  SIMCUDA_ENTER("cuFuncGetAttribute");
  return attribute(pi, attrib, hfunc, device_for(true, 0), CUDA_ERROR_INVALID_CONTEXT);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib,
                                                     CUkernel kernel, CUdevice dev) {
  SIMCUDA_ENTER("cuKernelGetAttribute");
  return attribute(pi, attrib, kernel, device_for(false, dev), CUDA_ERROR_INVALID_DEVICE);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib,
                                                   int value) {
  SIMCUDA_ENTER("cuFuncSetAttribute");
  return change_attribute(attrib, value, hfunc, device_for(true, 0), CUDA_ERROR_INVALID_CONTEXT);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val,
                                                     CUkernel kernel, CUdevice dev) {
  SIMCUDA_ENTER("cuKernelSetAttribute");
  return change_attribute(attrib, val, kernel, device_for(false, dev), CUDA_ERROR_INVALID_DEVICE);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache /*config*/) {
  SIMCUDA_ENTER("cuFuncSetCacheConfig");
  // A preference only; simcuda has no caches.
  return simcuda::kernel_of_function(hfunc) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  SIMCUDA_ENTER("cuFuncIsLoaded");
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::kernel_of_function(function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;  // nothing is ever loaded lazily
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuFuncLoad(CUfunction function) {
  SIMCUDA_ENTER("cuFuncLoad");
  return simcuda::kernel_of_function(function) != nullptr ? CUDA_SUCCESS
                                                          : CUDA_ERROR_INVALID_HANDLE;
}
