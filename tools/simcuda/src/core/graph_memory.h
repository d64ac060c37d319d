// Memory allocated by graphs: cuMemAllocAsync and cuMemFreeAsync on a capturing stream.
//
// Note [Graph memory]
// As in the driver (CUDA 11.4+), cuMemAllocAsync or cuMemAllocFromPoolAsync on a capturing
// stream records a memory allocation node and returns its address at once, and cuMemFreeAsync
// of that address on a stream of the same capture records a free node. The memory belongs to
// the graph, not to the pool: the pool's attributes do not count it; the device's graph memory
// attributes (cuDeviceGetGraphMemAttribute) do.
// - Each allocation node gets a mapping of its own, made at capture, so its address is the same
//   in every launch. It is registered from then on: pointer queries answer for it, and copies and
//   kernels recorded in the capture accept it. Its bytes are kept from one launch to the next.
// - VRAM is charged from the graph's first instantiation (CUDA_ERROR_OUT_OF_MEMORY there when it
//   does not fit) until the graph, its executable graphs, the launches still queued and any
//   allocation a launch left allocated are all gone. The driver reserves the physical memory at
//   instantiation or launch too, but shares it between graphs whose allocations never live at
//   the same time; simcuda never does.
// - An allocation without a free node in the graph stays allocated after each launch, and is
//   freed outside the graph by cuMemFreeAsync or cuMemFree. Launching the graph again before
//   that fails with CUDA_ERROR_INVALID_VALUE, unless it was instantiated with
//   CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, which frees it first.
// - cuMemFreeAsync on a capturing stream of memory that capture did not allocate returns
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (a free node of another graph's allocation is not
//   modeled).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/allocations.h"

namespace simcuda {

struct Context;
struct MemoryPool;

// One allocation node's memory. Destroying it unregisters and unmaps it, and uncharges its VRAM.
struct GraphAllocation {
  GraphAllocation() = default;
  GraphAllocation(const GraphAllocation&) = delete;
  GraphAllocation& operator=(const GraphAllocation&) = delete;
  ~GraphAllocation();

  Allocation memory;     // as registered
  bool charged = false;  // VRAM charged (from the first instantiation); graph_memory.cpp's lock
};

// Maps and registers `size` bytes on the device of `pool`, for an allocation node recorded on a
// stream of `context`.
CUresult new_graph_allocation(MemoryPool& pool, uint64_t size, Context* context,
                              std::shared_ptr<GraphAllocation>* out);
// At instantiation: charges what is not charged yet, all or nothing.
CUresult charge_graph_allocations(const std::vector<std::shared_ptr<GraphAllocation>>& allocations);
// At a launch, for the allocations the graph does not free: INVALID_VALUE when one is still
// allocated from an earlier launch (unless `auto_free`); otherwise they are allocated now.
CUresult launch_graph_allocations(
    const std::vector<std::shared_ptr<GraphAllocation>>& left_allocated, bool auto_free);
// cuMemFreeAsync or cuMemFree outside a graph: false when `address` is no graph allocation that a
// launch left allocated.
bool free_graph_allocation(uint64_t address);

// cuDeviceGetGraphMemAttribute and cuDeviceSetGraphMemAttribute (which resets a watermark).
CUresult graph_memory_attribute(int device, CUgraphMem_attribute attribute, cuuint64_t* value);
CUresult reset_graph_memory_watermark(int device, CUgraphMem_attribute attribute);

}  // namespace simcuda
