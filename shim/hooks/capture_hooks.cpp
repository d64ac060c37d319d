// Stream captures in progress, counted for tiered mode, which must not synchronise while one
// runs (Note [No moves during a capture] in placement/tiered_placement.h), and for the spill
// paths, which must not make or free managed memory then: Note [Counting captures] in
// core/capture_origins.h. A capture begins holding the capture gate, so that it never begins
// between the shim's look at a stream and its record there (Note [A capture begun while a move is
// queued] in tiers/driver_prefetch_ops.h), and ends holding it too. A capture into a graph the
// program made (cuStreamBeginCaptureToGraph, which XLA's command buffers use) counts as any
// other.
#include <mutex>

#include "driver/stream_capture.h"
#include "hooks/hook.h"
#include "hooks/shim_state.h"

using vramspill::hooks::Entry;
using vramspill::hooks::ShimState;

namespace {

uint64_t key(CUstream stream) { return reinterpret_cast<uint64_t>(stream); }

// `stream` is the stream the capture begins on, as the driver reads the call's argument.
template <typename Begin>
CUresult begin_capture(CUstream stream, Begin begin) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return begin();
  const auto changing = shim->captures.change();
  const CUresult result = begin();
  if (result == CUDA_SUCCESS)
    shim->captures.begun(key(stream), vramspill::driver::stream_context(key(stream)));
  return result;
}

template <typename End>
CUresult end_capture(CUstream stream, End end) {
  const Entry entry;
  ShimState* shim = entry.state();
  if (shim == nullptr) return end();
  const auto changing = shim->captures.change();
  // A per-thread default stream is every thread's key: another thread's may be capturing.
  // A stream the driver cannot answer for counts as capturing: nothing ends by its answer.
  const bool was_capturing = vramspill::driver::stream_capturing(key(stream));
  const uint64_t context = vramspill::driver::stream_context(key(stream));
  const CUresult result = end();
  if (was_capturing && !vramspill::driver::stream_capturing(key(stream)))
    shim->captures.ended(key(stream), context);
  return result;
}

// The per-thread forms read a null stream as the thread's default stream.
CUstream per_thread(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

}  // namespace

// CUDA 10.0's entry points, which capture in global mode; a lookup at version 10000 answers them.
VRAMSPILL_HOOK CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamBeginCapture);
  return begin_capture(hStream, [&] { return real(hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamBeginCapture_ptsz);
  return begin_capture(per_thread(hStream), [&] { return real(hStream); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream,
                                                        CUstreamCaptureMode mode) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamBeginCapture_v2);
  return begin_capture(hStream, [&] { return real(hStream, mode); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream,
                                                             CUstreamCaptureMode mode) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamBeginCapture_v2_ptsz);
  return begin_capture(per_thread(hStream), [&] { return real(hStream, mode); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                            const CUgraphNode* dependencies,
                                                            const CUgraphEdgeData* dependencyData,
                                                            size_t numDependencies,
                                                            CUstreamCaptureMode mode) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamBeginCaptureToGraph);
  return begin_capture(hStream, [&] {
    return real(hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(
    CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
    const CUgraphEdgeData* dependencyData, size_t numDependencies, CUstreamCaptureMode mode) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamBeginCaptureToGraph_ptsz);
  return begin_capture(per_thread(hStream), [&] {
    return real(hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
  });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamEndCapture);
  return end_capture(hStream, [&] { return real(hStream, phGraph); });
}

VRAMSPILL_HOOK CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  VRAMSPILL_REAL_OR_RETURN(real, cuStreamEndCapture_ptsz);
  return end_capture(per_thread(hStream), [&] { return real(hStream, phGraph); });
}
