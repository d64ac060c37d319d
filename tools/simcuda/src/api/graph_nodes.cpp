// Inspecting a captured graph's nodes, and updating an executable graph: a kernel node's
// parameters, or every node's from another graph (Note [Inspectable nodes] in
// core/graph_nodes.h).
#include "core/graph_nodes.h"

#include <algorithm>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"

using simcuda::GraphNode;

namespace {

CUresult node_of_type(CUgraphNode hNode, CUgraphNodeType type, std::shared_ptr<GraphNode>* out) {
  *out = simcuda::graph_node_from_handle(hNode);
  if (*out == nullptr || (*out)->type != type) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// The fields CUDA_KERNEL_NODE_PARAMS_v1 and _v2 share. A node keeps the handle its launch named:
// a CUkernel passed as a CUfunction comes back in `func`, as it went in.
template <typename Params>
void fill_kernel_params(const simcuda::KernelNode& kernel, Params* params) {
  params->func = static_cast<CUfunction>(const_cast<void*>(kernel.function));
  params->gridDimX = kernel.grid[0];
  params->gridDimY = kernel.grid[1];
  params->gridDimZ = kernel.grid[2];
  params->blockDimX = kernel.block[0];
  params->blockDimY = kernel.block[1];
  params->blockDimZ = kernel.block[2];
  params->sharedMemBytes = kernel.shared_bytes;
  // The node's own copy, valid while the graph lives (const_cast: the driver's type is void**).
  params->kernelParams = kernel.params.empty() ? nullptr : const_cast<void**>(kernel.params.data());
  params->extra = nullptr;
}

template <typename Params>
CUresult kernel_node_params(CUgraphNode hNode, Params* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphNode> node;
  if (CUresult result = node_of_type(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &node);
      result != CUDA_SUCCESS)
    return result;
  fill_kernel_params(node->kernel, params);
  return CUDA_SUCCESS;
}

// The v2 parameters name the kernel by `func`, or by `kern` when `func` is null.
const void* kernel_handle(const CUDA_KERNEL_NODE_PARAMS_v1& params) { return params.func; }
const void* kernel_handle(const CUDA_KERNEL_NODE_PARAMS_v2& params) {
  return params.func != nullptr ? static_cast<const void*>(params.func)
                                : static_cast<const void*>(params.kern);
}

template <typename Params>
CUresult set_exec_kernel_params(CUgraphExec hGraphExec, CUgraphNode hNode, const Params* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<simcuda::GraphExec> exec = simcuda::graph_exec_from_handle(hGraphExec);
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The node's handle must name one of the exec's nodes even after its graph is destroyed, so it
  // is compared by address (replace_exec_kernel), not looked up among live graphs.
  const auto* node = reinterpret_cast<const GraphNode*>(hNode);
  const unsigned grid[3] = {params->gridDimX, params->gridDimY, params->gridDimZ};
  const unsigned block[3] = {params->blockDimX, params->blockDimY, params->blockDimZ};
  simcuda::KernelWork replacement;
  if (CUresult result =
          simcuda::kernel_work(kernel_handle(*params), grid, block, params->sharedMemBytes,
                               params->kernelParams, params->extra, *exec->context, &replacement);
      result != CUDA_SUCCESS)
    return result;
  return simcuda::replace_exec_kernel(*exec, node, std::move(replacement));
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes,
                                                size_t* numNodes) {
  SIMCUDA_ENTER("cuGraphGetNodes");
  if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<simcuda::Graph> graph = simcuda::graph_from_handle(hGraph);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t count = graph->inspectable.size();
  if (nodes == nullptr) {
    *numNodes = count;
    return CUDA_SUCCESS;
  }
  // As documented: fill what fits, null the rest, and say how many were filled.
  const size_t filled = std::min(count, *numNodes);
  for (size_t i = 0; i < *numNodes; ++i)
    nodes[i] = i < filled ? simcuda::to_handle(graph->inspectable[i].get()) : nullptr;
  *numNodes = filled;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  SIMCUDA_ENTER("cuGraphNodeGetType");
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<GraphNode> node = simcuda::graph_node_from_handle(hNode);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                                           CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  SIMCUDA_ENTER("cuGraphKernelNodeGetParams");
  return kernel_node_params(hNode, nodeParams);
}

SIMCUDA_EXPORT CUresult CUDAAPI
cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  SIMCUDA_ENTER("cuGraphKernelNodeGetParams_v2");
  if (CUresult result = kernel_node_params(hNode, nodeParams); result != CUDA_SUCCESS)
    return result;
  nodeParams->kern = nullptr;
  nodeParams->ctx = nullptr;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode hNode,
                                                           CUDA_MEMCPY3D* nodeParams) {
  SIMCUDA_ENTER("cuGraphMemcpyNodeGetParams");
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphNode> node;
  if (CUresult result = node_of_type(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &node);
      result != CUDA_SUCCESS)
    return result;
  *nodeParams = node->copy;
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode hNode,
                                                           CUDA_MEMSET_NODE_PARAMS* nodeParams) {
  SIMCUDA_ENTER("cuGraphMemsetNodeGetParams");
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphNode> node;
  if (CUresult result = node_of_type(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &node);
      result != CUDA_SUCCESS)
    return result;
  *nodeParams = node->fill;
  return CUDA_SUCCESS;
}

// The node's own array, valid while the node is, as the driver's.
SIMCUDA_EXPORT CUresult CUDAAPI cuGraphBatchMemOpNodeGetParams(
    CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams_out) {
  SIMCUDA_ENTER("cuGraphBatchMemOpNodeGetParams");
  if (nodeParams_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphNode> node;
  if (CUresult result = node_of_type(hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &node);
      result != CUDA_SUCCESS)
    return result;
  *nodeParams_out = {.ctx = node->context,
                     .count = static_cast<unsigned int>(node->memory_operations.size()),
                     .paramArray = node->memory_operations.data(),
                     .flags = 0};
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  SIMCUDA_ENTER("cuGraphExecKernelNodeSetParams");
  return set_exec_kernel_params(hGraphExec, hNode, nodeParams);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  SIMCUDA_ENTER("cuGraphExecKernelNodeSetParams_v2");
  return set_exec_kernel_params(hGraphExec, hNode, nodeParams);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                     CUgraphExecUpdateResultInfo* resultInfo) {
  SIMCUDA_ENTER("cuGraphExecUpdate_v2");
  if (resultInfo == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *resultInfo = {
      .result = CU_GRAPH_EXEC_UPDATE_ERROR, .errorNode = nullptr, .errorFromNode = nullptr};
  const std::shared_ptr<simcuda::GraphExec> exec = simcuda::graph_exec_from_handle(hGraphExec);
  const std::shared_ptr<simcuda::Graph> graph = simcuda::graph_from_handle(hGraph);
  if (exec == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::update_exec(*exec, *graph, &resultInfo->result, &resultInfo->errorNode);
}

// The 11.x ABI: the same update, its result in two out-parameters.
SIMCUDA_EXPORT CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                                  CUgraphNode* hErrorNode_out,
                                                  CUgraphExecUpdateResult* updateResult_out) {
  SIMCUDA_ENTER("cuGraphExecUpdate");
  if (hErrorNode_out == nullptr || updateResult_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<simcuda::GraphExec> exec = simcuda::graph_exec_from_handle(hGraphExec);
  const std::shared_ptr<simcuda::Graph> graph = simcuda::graph_from_handle(hGraph);
  if (exec == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return simcuda::update_exec(*exec, *graph, updateResult_out, hErrorNode_out);
}
