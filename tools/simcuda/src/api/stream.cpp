// Streams: creation, synchronisation, queries, event waits and host functions.
#include <algorithm>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/device.h"
#include "core/event.h"
#include "core/host_clock.h"
#include "core/memory_pool.h"
#include "core/submit.h"

using simcuda::Context;
using simcuda::DefaultStream;
using simcuda::Stream;
using simcuda::StreamScope;

namespace {

// What an H100/H200 reports: priorities 0 (least) to -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

// [greatest, least]; both 0 on a device without stream priorities, as documented.
std::pair<int, int> priority_range(const simcuda::Device& device) {
  if (!device.attributes().supports(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED)) return {0, 0};
  return {kGreatestPriority, kLeastPriority};
}

CUresult create_stream(CUstream* phStream, unsigned int flags, int priority) {
  if (phStream == nullptr || (flags & ~static_cast<unsigned int>(CU_STREAM_NON_BLOCKING)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Out-of-range priorities are clamped, not refused.
  const auto [greatest, least] = priority_range(*context->device);
  Stream* stream = context->create_stream(flags, std::clamp(priority, greatest, least));
  *phStream = reinterpret_cast<CUstream>(stream);
  return CUDA_SUCCESS;
}

CUresult destroy_stream(CUstream hStream) {
  // The default streams are not the program's to destroy.
  if (hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_HANDLE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, DefaultStream::kLegacy, &stream);
      result != CUDA_SUCCESS)
    return result;
  simcuda::abandon_capture(*stream);
  stream->context()->retire_stream(stream);  // queued work still runs
  return CUDA_SUCCESS;
}

// The points synchronising with `stream` waits for: the legacy stream's implicit
// synchronisation makes it wait for every blocking stream too.
std::vector<simcuda::StreamPoint> sync_points(Stream& stream) {
  std::vector<simcuda::StreamPoint> points{stream.tail()};
  if (stream.kind() == Stream::Kind::kLegacyDefault) {
    std::vector<simcuda::StreamPoint> tails = stream.context()->blocking_stream_tails();
    points.insert(points.end(), tails.begin(), tails.end());
  }
  return points;
}

// The stream to synchronise with or query, after capture's rules for doing so (Note [Stream
// capture]).
CUresult resolve_for_sync(DefaultStream null_means, CUstream hStream, Stream** stream) {
  if (CUresult result = resolve_stream(hStream, null_means, stream); result != CUDA_SUCCESS)
    return result;
  // Any stream's, not only the legacy one's: a query or synchronisation is potentially unsafe
  // beside a capture (Note [Stream capture]).
  if (CUresult result = simcuda::check_unsafe_call(); result != CUDA_SUCCESS) return result;
  return simcuda::check_sync(**stream);
}

CUresult synchronize(DefaultStream null_means, CUstream hStream) {
  Stream* stream = nullptr;
  if (CUresult result = resolve_for_sync(null_means, hStream, &stream); result != CUDA_SUCCESS)
    return result;
  for (const simcuda::StreamPoint& point : sync_points(*stream)) simcuda::host_wait(point);
  // A synchronisation point, where stream-ordered pools give back memory (core/memory_pool.h).
  simcuda::trim_pools_at_synchronize(*stream->context()->device);
  return stream->context()->sticky_error.load();
}

CUresult query(DefaultStream null_means, CUstream hStream) {
  Stream* stream = nullptr;
  if (CUresult result = resolve_for_sync(null_means, hStream, &stream); result != CUDA_SUCCESS)
    return result;
  const std::vector<simcuda::StreamPoint> points = sync_points(*stream);
  double end = 0;
  uint64_t work = reinterpret_cast<uintptr_t>(stream);
  for (const simcuda::StreamPoint& point : points) {
    if (!point.stream->reached(point.sequence)) return CUDA_ERROR_NOT_READY;
    end = std::max(end, point.stream->modeled_end(point.sequence));
    work = work * 31 + point.sequence;
  }
  // As a GPU answers at the thread's clock (Note [Host clock]).
  if (!simcuda::host_clock_query_sees(work, end)) return CUDA_ERROR_NOT_READY;
  return stream->context()->sticky_error.load();
}

CUresult wait_event(DefaultStream null_means, CUstream hStream, CUevent hEvent,
                    unsigned int flags) {
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  const std::shared_ptr<simcuda::Event> event = simcuda::event_from_handle(hEvent);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags == CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_NOT_SUPPORTED;  // no external nodes
  if (flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  const std::optional<simcuda::EventRecord> record = event->last_record();
  if (!record) return CUDA_SUCCESS;  // an unrecorded event stands for no work
  if (record->capture_id != 0) return simcuda::join_capture(*stream, record->capture_id);
  if (CUresult result = simcuda::check_outside_dependency(*stream); result != CUDA_SUCCESS)
    return result;
  // Work simcuda has run already may still be running by the waiting stream's modeled clock:
  // what follows the wait starts no earlier than the record did. Skipping the wait, as simcuda
  // did, made the modeled order depend on how fast its threads ran.
  if (record->point.stream->reached(record->point.sequence))
    simcuda::submit(*stream, {}, {}, {}, record->modeled_time->load());
  else
    simcuda::submit(*stream, {}, {record->point});
  return CUDA_SUCCESS;
}

template <typename Value>
CUresult get_stream_property(DefaultStream null_means, CUstream hStream, Value* out,
                             Value (*read)(const Stream&)) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream, StreamScope::kAnyContext);
      result != CUDA_SUCCESS)
    return result;
  *out = read(*stream);
  return CUDA_SUCCESS;
}

CUresult get_flags(DefaultStream null_means, CUstream hStream, unsigned int* flags) {
  return get_stream_property<unsigned int>(null_means, hStream, flags,
                                           [](const Stream& s) { return s.flags(); });
}

CUresult get_priority(DefaultStream null_means, CUstream hStream, int* priority) {
  return get_stream_property<int>(null_means, hStream, priority,
                                  [](const Stream& s) { return s.priority(); });
}

CUresult get_context(DefaultStream null_means, CUstream hStream, CUcontext* pctx) {
  return get_stream_property<CUcontext>(null_means, hStream, pctx,
                                        [](const Stream& s) { return s.context()->handle(); });
}

CUresult get_context_v2(DefaultStream null_means, CUstream hStream, CUcontext* pCtx,
                        CUgreenCtx* pGreenCtx) {
  if (pGreenCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult result = get_context(null_means, hStream, pCtx);
  if (result == CUDA_SUCCESS) *pGreenCtx = nullptr;  // simcuda has no green contexts
  return result;
}

CUresult get_id(DefaultStream null_means, CUstream hStream, unsigned long long* id) {
  return get_stream_property<unsigned long long>(
      null_means, hStream, id, [](const Stream& s) -> unsigned long long { return s.id(); });
}

CUresult get_device(DefaultStream null_means, CUstream hStream, CUdevice* device) {
  return get_stream_property<CUdevice>(null_means, hStream, device, [](const Stream& s) {
    return static_cast<CUdevice>(s.context()->device->ordinal());
  });
}

CUresult launch_host_func(DefaultStream null_means, CUstream hStream, CUhostFn fn, void* userData) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  Context* context = stream->context();
  // Unlike a stream callback, a host function is skipped once the context has faulted.
  return simcuda::submit_async(*stream, [fn, userData, context] {
    if (context->sticky_error.load() == CUDA_SUCCESS) fn(userData);
    return 0.0;
  });
}

CUresult add_callback(DefaultStream null_means, CUstream hStream, CUstreamCallback callback,
                      void* userData, unsigned int flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  // Documented as unsupported in stream capture; refusing invalidates the capture.
  if (simcuda::stream_is_capturing(*stream)) return simcuda::check_sync(*stream);
  Context* context = stream->context();
  return simcuda::submit_async(*stream, [callback, hStream, userData, context] {
    callback(hStream, context->sticky_error.load(), userData);
    return 0.0;
  });
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  SIMCUDA_ENTER("cuStreamCreate");
  return create_stream(phStream, Flags, 0);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                                           int priority) {
  SIMCUDA_ENTER("cuStreamCreateWithPriority");
  return create_stream(phStream, flags, priority);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
  SIMCUDA_ENTER("cuStreamDestroy");
  return destroy_stream(hStream);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  SIMCUDA_ENTER("cuStreamDestroy_v2");
  return destroy_stream(hStream);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority,
                                                            int* greatestPriority) {
  SIMCUDA_ENTER("cuCtxGetStreamPriorityRange");
  Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const auto [greatest, least] = priority_range(*context->device);
  if (leastPriority != nullptr) *leastPriority = least;
  if (greatestPriority != nullptr) *greatestPriority = greatest;
  return CUDA_SUCCESS;
}

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamSynchronize, cuStreamSynchronize_ptsz, synchronize,
                               (CUstream hStream), hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamQuery, cuStreamQuery_ptsz, query, (CUstream hStream),
                               hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamWaitEvent, cuStreamWaitEvent_ptsz, wait_event,
                               (CUstream hStream, CUevent hEvent, unsigned int Flags), hStream,
                               hEvent, Flags)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetFlags, cuStreamGetFlags_ptsz, get_flags,
                               (CUstream hStream, unsigned int* flags), hStream, flags)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetPriority, cuStreamGetPriority_ptsz, get_priority,
                               (CUstream hStream, int* priority), hStream, priority)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetCtx, cuStreamGetCtx_ptsz, get_context,
                               (CUstream hStream, CUcontext* pctx), hStream, pctx)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz, get_context_v2,
                               (CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx), hStream,
                               pCtx, pGreenCtx)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetId, cuStreamGetId_ptsz, get_id,
                               (CUstream hStream, unsigned long long* streamId), hStream, streamId)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamGetDevice, cuStreamGetDevice_ptsz, get_device,
                               (CUstream hStream, CUdevice* device), hStream, device)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuLaunchHostFunc, cuLaunchHostFunc_ptsz, launch_host_func,
                               (CUstream hStream, CUhostFn fn, void* userData), hStream, fn,
                               userData)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuStreamAddCallback, cuStreamAddCallback_ptsz, add_callback,
                               (CUstream hStream, CUstreamCallback callback, void* userData,
                                unsigned int flags),
                               hStream, callback, userData, flags)
