// Stream capture and the graphs it produces (Note [Stream capture] in core/capture.h).
#include <atomic>
#include <span>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/submit.h"

using simcuda::DefaultStream;
using simcuda::Stream;

namespace {

constexpr unsigned long long kInstantiateFlags =
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

CUresult begin(DefaultStream null_means, CUstream hStream, CUstreamCaptureMode mode) {
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  return simcuda::begin_capture(*stream, mode);
}

// The pre-11.1 ABI had no mode argument; its captures behave as GLOBAL ones.
CUresult begin_global(DefaultStream null_means, CUstream hStream) {
  return begin(null_means, hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

// Note [Capturing into a graph] in core/capture.h.
CUresult begin_to_graph(DefaultStream null_means, CUstream hStream, CUgraph hGraph,
                        const CUgraphNode* dependencies, const CUgraphEdgeData* /*edge_data*/,
                        size_t dependency_count, CUstreamCaptureMode mode) {
  if (dependency_count != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<simcuda::Graph> graph = simcuda::graph_from_handle(hGraph);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!simcuda::graph_has_nodes(*graph, std::span(dependencies, dependency_count)))
    return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  return simcuda::begin_capture(*stream, mode, std::move(graph));
}

CUresult end(DefaultStream null_means, CUstream hStream, CUgraph* phGraph) {
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  simcuda::Graph* graph = nullptr;
  const CUresult result = simcuda::end_capture(*stream, &graph);
  if (result == CUDA_SUCCESS || result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    *phGraph = simcuda::to_handle(graph);
  return result;
}

CUresult info(DefaultStream null_means, CUstream hStream, CUstreamCaptureStatus* status,
              cuuint64_t* id, CUgraph* graph, const CUgraphNode** dependencies,
              const CUgraphEdgeData** edge_data, size_t* dependency_count) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  simcuda::CaptureInfo capture;
  if (CUresult result = simcuda::capture_info(*stream, capture); result != CUDA_SUCCESS)
    return result;
  *status = capture.status;
  if (id != nullptr) *id = capture.id;
  if (graph != nullptr) *graph = simcuda::to_handle(capture.graph);
  // simcuda reports no edges (Note [Inspectable nodes] in core/graph_nodes.h): a capture's
  // current dependencies are not named.
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edge_data != nullptr) *edge_data = nullptr;
  if (dependency_count != nullptr) *dependency_count = 0;
  return CUDA_SUCCESS;
}

CUresult is_capturing(DefaultStream d, CUstream hStream, CUstreamCaptureStatus* status) {
  return info(d, hStream, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}

CUresult info_v1(DefaultStream d, CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return info(d, hStream, status, id, nullptr, nullptr, nullptr, nullptr);
}

CUresult info_v2(DefaultStream d, CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id,
                 CUgraph* graph, const CUgraphNode** dependencies, size_t* count) {
  return info(d, hStream, status, id, graph, dependencies, nullptr, count);
}

CUresult info_v3(DefaultStream d, CUstream hStream, CUstreamCaptureStatus* status, cuuint64_t* id,
                 CUgraph* graph, const CUgraphNode** dependencies,
                 const CUgraphEdgeData** edge_data, size_t* count) {
  return info(d, hStream, status, id, graph, dependencies, edge_data, count);
}

CUresult instantiate(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  if (phGraphExec == nullptr || (flags & ~kInstantiateFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::shared_ptr<simcuda::Graph> graph = simcuda::graph_from_handle(hGraph);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<simcuda::GraphExec> exec;
  const bool auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  if (CUresult result = simcuda::new_graph_exec(*graph, auto_free, &exec); result != CUDA_SUCCESS)
    return result;
  *phGraphExec = simcuda::to_handle(exec.get());
  return CUDA_SUCCESS;
}

// The 5-argument ABI of cuGraphInstantiate (before 12.0) and cuGraphInstantiate_v2.
CUresult instantiate_with_log(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                              char* logBuffer, size_t bufferSize) {
  const CUresult result = instantiate(phGraphExec, hGraph, 0);
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return result;
}

CUresult instantiate_with_params(DefaultStream, CUgraphExec* phGraphExec, CUgraph hGraph,
                                 CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = instantiate(phGraphExec, hGraph, params->flags);
  params->hErrNode_out = nullptr;
  params->result_out =
      result == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return result;
}

// Resolves both handles of a launch or upload.
CUresult exec_and_stream(DefaultStream null_means, CUgraphExec hGraphExec, CUstream hStream,
                         std::shared_ptr<simcuda::GraphExec>* exec, Stream** stream) {
  *exec = simcuda::graph_exec_from_handle(hGraphExec);
  if (*exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult result = resolve_stream(hStream, null_means, stream); result != CUDA_SUCCESS)
    return result;
  return (*stream)->context() == (*exec)->context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult launch(DefaultStream null_means, CUgraphExec hGraphExec, CUstream hStream) {
  std::shared_ptr<simcuda::GraphExec> exec;
  Stream* stream = nullptr;
  if (CUresult result = exec_and_stream(null_means, hGraphExec, hStream, &exec, &stream);
      result != CUDA_SUCCESS)
    return result;
  if (CUresult result =
          simcuda::launch_graph_allocations(exec->left_allocated, exec->auto_free_on_launch);
      result != CUDA_SUCCESS)
    return result;
  // One piece of work per launch: the graph's work runs in order, and nothing queued on the
  // stream later can start before all of it is done.
  // A launch lets go of the nodes as it finishes, before the stream counts it done, so that
  // once a synchronisation returns, the graph's memory (Note [Graph memory]) belongs to the graph
  // and its executable graphs alone and goes when they go. A launch recorded by a capture keeps
  // them: the outer graph replays it. (If the work ran before `one_shot` was set, it keeps them
  // until the stream drops it, a moment later.)
  struct Launch {
    std::shared_ptr<const std::vector<simcuda::StreamWork>> nodes;
    std::atomic<bool> one_shot{false};
  };
  auto run = std::make_shared<Launch>();
  run->nodes = exec->nodes;
  simcuda::Placement placement;
  const CUresult result = simcuda::submit_async(
      *stream,
      [run] {
        double seconds = 0.0;
        for (const simcuda::StreamWork& node : *run->nodes) {
          const double took = node();
          seconds += took;
          simcuda::running_work_took(took);  // the next node starts after this one
        }
        if (run->one_shot.load()) run->nodes.reset();
        return seconds;
      },
      &placement, simcuda::Footprint{"graph launch", exec->touches});
  if (result == CUDA_SUCCESS && placement.capture_id == 0) run->one_shot.store(true);
  return result;
}

CUresult upload(DefaultStream null_means, CUgraphExec hGraphExec, CUstream hStream) {
  std::shared_ptr<simcuda::GraphExec> exec;
  Stream* stream = nullptr;
  return exec_and_stream(null_means, hGraphExec, hStream, &exec, &stream);  // nothing to upload
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
  SIMCUDA_ENTER("cuStreamBeginCapture");
  return begin_global(DefaultStream::kLegacy, hStream);
}
SIMCUDA_EXPORT CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
  SIMCUDA_ENTER("cuStreamBeginCapture_ptsz");
  return begin_global(DefaultStream::kPerThread, hStream);
}
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz, begin,
                               (CUstream hStream, CUstreamCaptureMode mode), hStream, mode)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz,
                               begin_to_graph,
                               (CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                CUstreamCaptureMode mode),
                               hStream, hGraph, dependencies, dependencyData, numDependencies,
                               mode)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamEndCapture, cuStreamEndCapture_ptsz, end,
                               (CUstream hStream, CUgraph* phGraph), hStream, phGraph)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, is_capturing,
                               (CUstream hStream, CUstreamCaptureStatus* captureStatus), hStream,
                               captureStatus)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz, info_v1,
                               (CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                cuuint64_t* id_out),
                               hStream, captureStatus_out, id_out)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz, info_v2,
                               (CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                cuuint64_t* id_out, CUgraph* graph_out,
                                const CUgraphNode** dependencies_out, size_t* numDependencies_out),
                               hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                               numDependencies_out)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz, info_v3,
                               (CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                cuuint64_t* id_out, CUgraph* graph_out,
                                const CUgraphNode** dependencies_out,
                                const CUgraphEdgeData** edgeData_out, size_t* numDependencies_out),
                               hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                               edgeData_out, numDependencies_out)

SIMCUDA_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  SIMCUDA_ENTER("cuThreadExchangeStreamCaptureMode");
  return simcuda::exchange_thread_capture_mode(mode);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  SIMCUDA_ENTER("cuGraphCreate");
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  simcuda::Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *phGraph = simcuda::to_handle(simcuda::new_graph(context).get());
  return CUDA_SUCCESS;
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  SIMCUDA_ENTER("cuGraphDestroy");
  return simcuda::destroy_graph(hGraph);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec,
                                                            CUgraph hGraph,
                                                            unsigned long long flags) {
  SIMCUDA_ENTER("cuGraphInstantiateWithFlags");
  return instantiate(phGraphExec, hGraph, flags);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   CUgraphNode* phErrorNode, char* logBuffer,
                                                   size_t bufferSize) {
  SIMCUDA_ENTER("cuGraphInstantiate");
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                      CUgraphNode* phErrorNode, char* logBuffer,
                                                      size_t bufferSize) {
  SIMCUDA_ENTER("cuGraphInstantiate_v2");
  return instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz,
                               instantiate_with_params,
                               (CUgraphExec * phGraphExec, CUgraph hGraph,
                                CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams),
                               phGraphExec, hGraph, instantiateParams)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuGraphLaunch, cuGraphLaunch_ptsz, launch,
                               (CUgraphExec hGraphExec, CUstream hStream), hGraphExec, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuGraphUpload, cuGraphUpload_ptsz, upload,
                               (CUgraphExec hGraphExec, CUstream hStream), hGraphExec, hStream)

SIMCUDA_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  SIMCUDA_ENTER("cuGraphExecDestroy");
  return simcuda::destroy_graph_exec(hGraphExec);
}
