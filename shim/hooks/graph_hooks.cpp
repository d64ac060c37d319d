// Executable graphs in tiered mode: what each one touches is read from its graph's nodes when it
// is instantiated, re-read when an exec setter or cuGraphExecUpdate changes it, and forgotten when
// it is destroyed (Note [Reading a graph] in core/graph_uses.h); cuGraphLaunch records it
// (hooks/use_tracking.h, record_graph). The table changes only after the driver's call has
// succeeded, so it never names what the exec does not do yet; a setter that fails may have changed
// part of the exec, so the exec then touches everything. Other modes track nothing: the hooks
// forward and read nothing.
#include <cuda.h>

#include "core/graph_uses.h"
#include "hooks/hook.h"
#include "hooks/shim_state.h"
#include "telemetry/log.h"

using vramspill::core::GraphRead;
using vramspill::core::NodeUses;
using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

vramspill::core::GraphQueries graph_queries() noexcept {
  return {.nodes = VRAMSPILL_REAL(cuGraphGetNodes),
          .node_type = VRAMSPILL_REAL(cuGraphNodeGetType),
          .kernel = VRAMSPILL_REAL(cuGraphKernelNodeGetParams_v2),
          .memcpy = VRAMSPILL_REAL(cuGraphMemcpyNodeGetParams),
          .memset = VRAMSPILL_REAL(cuGraphMemsetNodeGetParams),
          .child = VRAMSPILL_REAL(cuGraphChildGraphNodeGetGraph),
          .memory_operations = VRAMSPILL_REAL(cuGraphBatchMemOpNodeGetParams),
          .layouts = {.function = VRAMSPILL_REAL(cuFuncGetParamInfo),
                      .kernel = VRAMSPILL_REAL(cuKernelGetParamInfo)}};
}

// The shim's state when it is in tiered mode, the only mode that tracks uses.
ShimState* tiered_state(const Entry& entry) noexcept {
  ShimState* shim = entry.state();
  if (shim == nullptr || shim->config.spill.mode != vramspill::SpillMode::kTiered) return nullptr;
  return shim;
}

// Once per process: a graph the shim cannot read makes tiered mode wait for its launches before
// any move and hides its uses from the policy.
void say_unread(CUgraphExec exec, GraphRead why) noexcept {
  static constinit std::atomic<bool> said{false};
  if (why == GraphRead::kRead || said.exchange(true)) return;
  vramspill::logging::warn(
      "an executable graph ({}) could not be read ({}): its launches are taken as touching every "
      "tiered block (later graphs are not reported)",
      static_cast<const void*>(exec), vramspill::core::describe(why));
}

// Reads `graph` for `exec` into the table; the driver's result is passed through.
CUresult instantiated(CUresult result, CUgraphExec* exec, CUgraph graph) noexcept {
  if (result != CUDA_SUCCESS || exec == nullptr) return result;
  const Entry entry;
  ShimState* shim = tiered_state(entry);
  if (shim == nullptr) return result;
  try {
    vramspill::core::GraphReading reading =
        vramspill::core::read_graph(graph, graph_queries(), shim->launch_layouts);
    shim->graph_uses.instantiated(*exec, std::move(reading));
  } catch (...) {
    shim->graph_uses.forget(*exec);  // out of memory: its launches touch everything
  }
  if (const auto uses = shim->graph_uses.find(*exec); uses != nullptr) {
    say_unread(*exec, uses->read);
    vramspill::logging::debug("graph exec {} read: {} words, {} ranges ({})",
                              static_cast<const void*>(*exec), uses->words.size(),
                              uses->ranges.size(), vramspill::core::describe(uses->read));
  }
  return result;
}

// One node's new parameters after a setter: `read` gives its uses, run only once the driver took
// them.
template <typename Read>
CUresult node_set(CUresult result, CUgraphExec exec, CUgraphNode node, Read read) noexcept {
  const Entry entry;
  ShimState* shim = tiered_state(entry);
  if (shim == nullptr) return result;
  try {
    if (result == CUDA_SUCCESS) {
      shim->graph_uses.update_node(exec, node, read(*shim));
    } else {
      shim->graph_uses.touch_everything(exec, GraphRead::kUpdateFailed);
    }
  } catch (...) {
    shim->graph_uses.forget(exec);
  }
  return result;
}

// The fields every version of the kernel node parameters shares, as the reader takes them.
template <typename Params>
CUDA_KERNEL_NODE_PARAMS_v2 as_v2(const Params& p) noexcept {
  CUDA_KERNEL_NODE_PARAMS_v2 v2{};
  v2.func = p.func;
  v2.gridDimX = p.gridDimX;
  v2.gridDimY = p.gridDimY;
  v2.gridDimZ = p.gridDimZ;
  v2.blockDimX = p.blockDimX;
  v2.blockDimY = p.blockDimY;
  v2.blockDimZ = p.blockDimZ;
  v2.sharedMemBytes = p.sharedMemBytes;
  v2.kernelParams = p.kernelParams;
  v2.extra = p.extra;
  if constexpr (requires { p.kern; }) v2.kern = p.kern;
  return v2;
}

template <typename Params>
CUresult kernel_set(CUresult result, CUgraphExec exec, CUgraphNode node,
                    const Params* params) noexcept {
  return node_set(result, exec, node, [&](ShimState& shim) {
    return vramspill::core::read_kernel(as_v2(*params), graph_queries(), shim.launch_layouts);
  });
}

// cuGraphExecNodeSetParams: the types the reader knows; any other may touch memory unseen.
NodeUses read_node_params(ShimState& shim, const CUgraphNodeParams& p) {
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return vramspill::core::read_kernel(as_v2(p.kernel), graph_queries(), shim.launch_layouts);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return vramspill::core::read_memcpy(p.memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return vramspill::core::read_memset({.dst = p.memset.dst,
                                           .pitch = p.memset.pitch,
                                           .value = p.memset.value,
                                           .elementSize = p.memset.elementSize,
                                           .width = p.memset.width,
                                           .height = p.memset.height});
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return vramspill::core::read_child(p.graph.graph, graph_queries(), shim.launch_layouts);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      return vramspill::core::read_memory_operations(p.memOp.paramArray, p.memOp.count);
    default:
      return vramspill::core::uses_of_type(p.type);
  }
}

// cuGraphExecUpdate: the exec now runs `graph`'s nodes, read whole; a failed update may have
// changed part of it.
CUresult updated(CUresult result, CUgraphExec exec, CUgraph graph) noexcept {
  const Entry entry;
  ShimState* shim = tiered_state(entry);
  if (shim == nullptr) return result;
  try {
    if (result == CUDA_SUCCESS) {
      shim->graph_uses.update_all(
          exec, vramspill::core::read_graph(graph, graph_queries(), shim->launch_layouts));
    } else {
      shim->graph_uses.touch_everything(exec, GraphRead::kUpdateFailed);
    }
  } catch (...) {
    shim->graph_uses.forget(exec);
  }
  return result;
}

}  // namespace

// --- Instantiation --------------------------------------------------------------------------

#define VRAMSPILL_INSTANTIATE_WITH_LOG(name)                                           \
  VRAMSPILL_HOOK CUresult CUDAAPI name(CUgraphExec* phGraphExec, CUgraph hGraph,       \
                                       CUgraphNode* phErrorNode, char* logBuffer,      \
                                       size_t bufferSize) {                            \
    VRAMSPILL_REAL_OR_RETURN(real, name);                                              \
    return instantiated(real(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize), \
                        phGraphExec, hGraph);                                          \
  }
VRAMSPILL_INSTANTIATE_WITH_LOG(cuGraphInstantiate)
VRAMSPILL_INSTANTIATE_WITH_LOG(cuGraphInstantiate_v2)

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec,
                                                            CUgraph hGraph,
                                                            unsigned long long flags) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphInstantiateWithFlags);
  return instantiated(real(phGraphExec, hGraph, flags), phGraphExec, hGraph);
}

#define VRAMSPILL_INSTANTIATE_WITH_PARAMS(name)                                  \
  VRAMSPILL_HOOK CUresult CUDAAPI name(CUgraphExec* phGraphExec, CUgraph hGraph, \
                                       CUDA_GRAPH_INSTANTIATE_PARAMS* params) {  \
    VRAMSPILL_REAL_OR_RETURN(real, name);                                        \
    return instantiated(real(phGraphExec, hGraph, params), phGraphExec, hGraph); \
  }
VRAMSPILL_INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams)
VRAMSPILL_INSTANTIATE_WITH_PARAMS(cuGraphInstantiateWithParams_ptsz)

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecDestroy);
  {
    // Forgotten first: once the driver has the handle back it may name a new exec.
    const Entry entry;
    if (ShimState* shim = entry.state()) shim->graph_uses.forget(hGraphExec);
  }
  return real(hGraphExec);
}

// --- Updates ---------------------------------------------------------------------------------

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecKernelNodeSetParams(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecKernelNodeSetParams);
  return kernel_set(real(hGraphExec, hNode, nodeParams), hGraphExec, hNode, nodeParams);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecKernelNodeSetParams_v2);
  return kernel_set(real(hGraphExec, hNode, nodeParams), hGraphExec, hNode, nodeParams);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec,
                                                               CUgraphNode hNode,
                                                               const CUDA_MEMCPY3D* copyParams,
                                                               CUcontext ctx) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecMemcpyNodeSetParams);
  return node_set(real(hGraphExec, hNode, copyParams, ctx), hGraphExec, hNode,
                  [&](ShimState&) { return vramspill::core::read_memcpy(*copyParams); });
}

VRAMSPILL_HOOK CUresult CUDAAPI
cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                               const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext ctx) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecMemsetNodeSetParams);
  return node_set(real(hGraphExec, hNode, memsetParams, ctx), hGraphExec, hNode,
                  [&](ShimState&) { return vramspill::core::read_memset(*memsetParams); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecBatchMemOpNodeSetParams(
    CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecBatchMemOpNodeSetParams);
  return node_set(real(hGraphExec, hNode, nodeParams), hGraphExec, hNode, [&](ShimState&) {
    return vramspill::core::read_memory_operations(nodeParams->paramArray, nodeParams->count);
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec,
                                                                   CUgraphNode hNode,
                                                                   CUgraph childGraph) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecChildGraphNodeSetParams);
  return node_set(real(hGraphExec, hNode, childGraph), hGraphExec, hNode, [&](ShimState& shim) {
    return vramspill::core::read_child(childGraph, graph_queries(), shim.launch_layouts);
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                         CUgraphNodeParams* nodeParams) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecNodeSetParams);
  return node_set(real(hGraphExec, hNode, nodeParams), hGraphExec, hNode,
                  [&](ShimState& shim) { return read_node_params(shim, *nodeParams); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                                  CUgraphNode* hErrorNode_out,
                                                  CUgraphExecUpdateResult* updateResult_out) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecUpdate);
  return updated(real(hGraphExec, hGraph, hErrorNode_out, updateResult_out), hGraphExec, hGraph);
}

VRAMSPILL_HOOK CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                     CUgraphExecUpdateResultInfo* resultInfo) {
  VRAMSPILL_REAL_OR_RETURN(real, cuGraphExecUpdate_v2);
  return updated(real(hGraphExec, hGraph, resultInfo), hGraphExec, hGraph);
}
