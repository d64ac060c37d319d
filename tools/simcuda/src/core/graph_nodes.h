// The nodes of a captured graph as a program can inspect them: cuGraphGetNodes, cuGraphNodeGetType
// and the kernel, memcpy and memset parameter getters (api/graph_nodes.cpp), and the one exec
// update simcuda models, cuGraphExecKernelNodeSetParams.
//
// Note [Inspectable nodes]
// A capture records each piece of work as a closure that replays it (Note [Stream capture] in
// capture.h); next to it, the graph keeps a GraphNode that says what the work was, as the driver
// reports it: a kernel's function, shape and arguments (packed, with kernelParams pointing into
// the node's own copy, valid while the graph lives, as documented), a copy as a CUDA_MEMCPY3D, a
// memset as a CUDA_MEMSET_NODE_PARAMS, a memory allocation or free node's address. The node's
// handle is the GraphNode's address. Simplifications: nodes form a chain in capture order (no
// edges are reported), copy sides are CU_MEMORYTYPE_DEVICE where the export names device memory
// and CU_MEMORYTYPE_UNIFIED otherwise (a pointer of either kind, as unified addressing allows),
// and a captured cuMemPrefetchAsync, which has no node type of its own, shows as a host node.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "core/stream.h"

namespace simcuda {

struct Context;

struct KernelNode {
  const void* function = nullptr;  // the CUfunction or CUkernel the launch named
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<std::byte> packed;  // the arguments at their ABI offsets
  std::vector<void*> params;      // one pointer per parameter, into `packed`
};

struct GraphNode {
  static constexpr size_t kNoWork = std::numeric_limits<size_t>::max();

  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_HOST;
  size_t work = kNoWork;           // its index in Graph::nodes and GraphExec::nodes, if it has work
  KernelNode kernel;               // CU_GRAPH_NODE_TYPE_KERNEL
  CUDA_MEMCPY3D copy{};            // CU_GRAPH_NODE_TYPE_MEMCPY
  CUDA_MEMSET_NODE_PARAMS fill{};  // CU_GRAPH_NODE_TYPE_MEMSET
  CUdeviceptr address = 0;         // CU_GRAPH_NODE_TYPE_MEM_ALLOC and _MEM_FREE
  size_t bytes = 0;                // CU_GRAPH_NODE_TYPE_MEM_ALLOC
  CUcontext context = nullptr;     // CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: its context and operations
  std::vector<CUstreamBatchMemOpParams> memory_operations;
  std::vector<AddressRange> touches;  // its work's footprint when captured (Note [Remap protocol])
};

inline CUgraphNode to_handle(GraphNode* node) { return reinterpret_cast<CUgraphNode>(node); }

// A kernel launch of `function` with these arguments in `context`: the work that runs it, what it
// may touch, and its node. Shared by cuLaunchKernel and cuGraphExecKernelNodeSetParams
// (api/launch.cpp). CUDA_ERROR_INVALID_HANDLE for an unknown function, CUDA_ERROR_INVALID_VALUE
// for arguments that do not fit it.
struct KernelWork {
  StreamWork work;
  Footprint footprint;
  std::shared_ptr<GraphNode> node;
};
CUresult kernel_work(const void* function, const unsigned grid[3], const unsigned block[3],
                     unsigned shared_bytes, void** params, void** extra, Context& context,
                     KernelWork* out);

}  // namespace simcuda
