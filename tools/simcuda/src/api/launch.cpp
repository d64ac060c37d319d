// Kernel launches: cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel, with their
// per-thread-stream forms. Each takes a CUfunction or a CUkernel passed as one (Note [Functions
// and kernels] in core/loaded_code.h).
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
#include "core/graph_nodes.h"
#include "core/host_call_cost.h"
#include "core/kernel_fault.h"
#include "core/kernels.h"
#include "core/loaded_code.h"
#include "core/peer_access.h"
#include "core/remap_check.h"
#include "core/stream.h"
#include "core/submit.h"
#include "core/traffic.h"

using simcuda::Context;
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
    // Note [Waiting for a prefetch] in core/managed.cpp: before the accounting, which may fault
    // pages in itself.
    const double start = simcuda::running_work_start();
    double arrival = start;
    for (const simcuda::MemoryRange& range : ranges)
      arrival = std::max(arrival,
                         simcuda::prefetched_arrival(*context.device, range.address, range.size));
    seconds += arrival - start;
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

// cuLaunchCooperativeKernel's conditions: the device supports it, and every block of the grid
// fits on the device at once. simcuda's kernels use 16 registers and no static shared memory
// (their fixed attributes, api/function_queries.cpp), so what limits residency is the threads a
// multiprocessor holds and the 32 blocks a compute capability 9.0 multiprocessor holds.
CUresult check_cooperative(const simcuda::Device& device, uint64_t blocks,
                           uint64_t threads_per_block) {
  const auto& attributes = device.attributes();
  if (!attributes.supports(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)) return CUDA_ERROR_NOT_SUPPORTED;
  constexpr uint64_t kMaxBlocksPerMultiprocessor = 32;
  const auto threads = static_cast<uint64_t>(
      attributes.get(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR).value_or(0));
  const auto multiprocessors =
      static_cast<uint64_t>(attributes.get(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).value_or(0));
  const uint64_t per_multiprocessor =
      std::min(kMaxBlocksPerMultiprocessor, threads / threads_per_block);
  return blocks <= per_multiprocessor * multiprocessors ? CUDA_SUCCESS
                                                        : CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
}

}  // namespace

CUresult simcuda::kernel_work(const void* function, const unsigned grid[3],
                              const unsigned block[3], unsigned shared_bytes, void** params,
                              void** extra, Context& context, KernelWork* out) {
  const KernelDef* kernel = simcuda::launch_definition(function);
  if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_dimensions(grid[0], grid[1], grid[2], block[0], block[1], block[2]))
    return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::byte> packed;
  if (CUresult result = pack_arguments(*kernel, params, extra, packed); result != CUDA_SUCCESS)
    return result;
  // Installed here, on the program's thread, rather than lazily on a worker.
  simcuda::install_fault_handler();
  // The node keeps its own copy of the arguments for cuGraphKernelNodeGetParams (Note
  // [Inspectable nodes] in core/graph_nodes.h).
  auto node = std::make_shared<simcuda::GraphNode>();
  node->type = CU_GRAPH_NODE_TYPE_KERNEL;
  node->kernel.function = function;
  std::copy_n(grid, 3, node->kernel.grid);
  std::copy_n(block, 3, node->kernel.block);
  node->kernel.shared_bytes = shared_bytes;
  node->kernel.packed = packed;
  for (size_t i = 0; i < kernel->params.size(); ++i)
    node->kernel.params.push_back(node->kernel.packed.data() + simcuda::param_offset(*kernel, i));
  // The work may be recorded by a stream capture and replayed later: it owns what it uses (the
  // kernel table is static; contexts outlive their streams' work).
  KernelArgs args(std::move(packed));
  simcuda::Footprint footprint{kernel->name, {}};
  for (const simcuda::MemoryRange& range : kernel->touches(args))
    footprint.ranges.push_back({range.address, range.size});
  Context* owner = &context;
  out->work = [kernel, args = std::move(args), owner] { return execute(*kernel, args, *owner); };
  out->footprint = std::move(footprint);
  out->node = std::move(node);
  return CUDA_SUCCESS;
}

namespace {

enum class Cooperation { kNone, kCooperative };

CUresult launch(simcuda::DefaultStream null_means, const void* function, unsigned int gx,
                unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                unsigned int shared_bytes, CUstream handle, void** params, void** extra,
                Cooperation cooperation = Cooperation::kNone) {
  simcuda::Stream* stream = nullptr;
  if (CUresult result = simcuda::resolve_stream(handle, null_means, &stream);
      result != CUDA_SUCCESS)
    return result;
  const KernelDef* kernel = simcuda::launch_definition(function);
  if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_dimensions(gx, gy, gz, bx, by, bz)) return CUDA_ERROR_INVALID_VALUE;
  Context* context = stream->context();
  if (cooperation == Cooperation::kCooperative) {
    if (CUresult result =
            check_cooperative(*context->device, uint64_t{gx} * gy * gz, uint64_t{bx} * by * bz);
        result != CUDA_SUCCESS)
      return result;
  }
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  simcuda::KernelWork launched;
  if (CUresult result = simcuda::kernel_work(function, grid, block, shared_bytes, params, extra,
                                             *context, &launched);
      result != CUDA_SUCCESS)
    return result;
  const CUresult result =
      simcuda::submit_async(*stream, std::move(launched.work), nullptr,
                            std::move(launched.footprint), std::move(launched.node));
  if (result == CUDA_SUCCESS) simcuda::charge_launch();  // Note [Host call costs]
  return result;
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

// Parameters come only through kernelParams: the call has no `extra`.
CUresult launch_cooperative(simcuda::DefaultStream null_means, CUfunction f, unsigned int gx,
                            unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                            unsigned int bz, unsigned int shared_bytes, CUstream handle,
                            void** params) {
  return launch(null_means, f, gx, gy, gz, bx, by, bz, shared_bytes, handle, params, nullptr,
                Cooperation::kCooperative);
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

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz,
                               launch_cooperative,
                               (CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams),
                               f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams)
