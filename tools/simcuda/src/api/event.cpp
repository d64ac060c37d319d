// Events: record, query, synchronise, and elapsed time on the modeled clock (core/event.h).
#include "core/event.h"

#include <memory>

#include "core/api.h"
#include "core/capture.h"
#include "core/context.h"
#include "core/device.h"
#include "core/host_clock.h"
#include "core/memory_pool.h"
#include "core/submit.h"

using simcuda::Event;
using simcuda::EventRecord;

namespace {

CUresult create(CUevent* phEvent, unsigned int flags) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  simcuda::Context* context = simcuda::current_context();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return simcuda::create_event(context, flags, phEvent);
}

CUresult record(simcuda::DefaultStream null_means, CUevent hEvent, CUstream hStream,
                unsigned int flags) {
  const std::shared_ptr<Event> event = simcuda::event_from_handle(hEvent);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  simcuda::Stream* stream = nullptr;
  if (CUresult result = resolve_stream(hStream, null_means, &stream); result != CUDA_SUCCESS)
    return result;
  if (stream->context() != event->context) return CUDA_ERROR_INVALID_HANDLE;
  // External record nodes exist only in capture, and simcuda's graphs have none.
  if (flags == CU_EVENT_RECORD_EXTERNAL)
    return simcuda::stream_is_capturing(*stream) ? CUDA_ERROR_NOT_SUPPORTED
                                                 : CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_EVENT_RECORD_DEFAULT) return CUDA_ERROR_INVALID_VALUE;

  uint64_t capture_id = 0;
  if (CUresult result = simcuda::capture_work(*stream, {}, &capture_id); result != CUDA_SUCCESS)
    return result;
  if (capture_id != 0) {
    // In a capture a record adds no graph node: it marks the event for forks and joins.
    event->set_record({.point = {}, .capture_id = capture_id, .modeled_time = nullptr});
    return CUDA_SUCCESS;
  }
  auto modeled_time = std::make_shared<std::atomic<double>>(0.0);
  const uint64_t sequence = simcuda::submit(*stream, [modeled_time, stream] {
    modeled_time->store(stream->modeled_clock());
    return 0.0;
  });
  event->set_record({.point = {stream, sequence}, .modeled_time = std::move(modeled_time)});
  return CUDA_SUCCESS;
}

// The event's record, or the driver's error for an event that cannot be waited on.
CUresult completed_record(CUevent hEvent, std::optional<EventRecord>* out,
                          std::shared_ptr<Event>* event_out = nullptr) {
  std::shared_ptr<Event> event = simcuda::event_from_handle(hEvent);
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = event->last_record();
  if (*out && (*out)->capture_id != 0) return CUDA_ERROR_CAPTURED_EVENT;
  if (event_out != nullptr) *event_out = std::move(event);
  return CUDA_SUCCESS;
}

bool reached(const EventRecord& record) {
  return record.point.stream->reached(record.point.sequence);
}

CUresult query(CUevent hEvent) {
  std::optional<EventRecord> record;
  if (CUresult result = completed_record(hEvent, &record); result != CUDA_SUCCESS) return result;
  // Potentially unsafe beside a capture, like a synchronisation (Note [Stream capture]).
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  if (!record) return CUDA_SUCCESS;
  if (!reached(*record)) return CUDA_ERROR_NOT_READY;
  // As a GPU answers at the thread's clock (Note [Host clock]).
  const uint64_t work = reinterpret_cast<uintptr_t>(hEvent) * 31 + record->point.sequence;
  if (!simcuda::host_clock_query_sees(work, record->modeled_time->load()))
    return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}

CUresult synchronize(CUevent hEvent) {
  std::optional<EventRecord> record;
  std::shared_ptr<Event> event;
  if (CUresult result = completed_record(hEvent, &record, &event); result != CUDA_SUCCESS)
    return result;
  if (CUresult refused = simcuda::check_unsafe_call(); refused != CUDA_SUCCESS) return refused;
  if (record) {
    record->point.stream->wait_until(record->point.sequence);
    simcuda::host_clock_observe(record->modeled_time->load());
  }
  // A synchronisation point, where stream-ordered pools give back memory (core/memory_pool.h).
  simcuda::trim_pools_at_synchronize(*event->context->device);
  return CUDA_SUCCESS;
}

CUresult elapsed_time(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<EventRecord> start, end;
  std::shared_ptr<Event> start_event, end_event;
  if (CUresult result = completed_record(hStart, &start, &start_event); result != CUDA_SUCCESS)
    return result;
  if (CUresult result = completed_record(hEnd, &end, &end_event); result != CUDA_SUCCESS)
    return result;
  if (start_event->timing_disabled() || end_event->timing_disabled() || !start || !end)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!reached(*start) || !reached(*end)) return CUDA_ERROR_NOT_READY;
  *pMilliseconds =
      static_cast<float>((end->modeled_time->load() - start->modeled_time->load()) * 1e3);
  return CUDA_SUCCESS;
}

}  // namespace

SIMCUDA_EXPORT CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  SIMCUDA_ENTER("cuEventCreate");
  return create(phEvent, Flags);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
  SIMCUDA_ENTER("cuEventDestroy");
  return simcuda::destroy_event(hEvent);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  SIMCUDA_ENTER("cuEventDestroy_v2");
  return simcuda::destroy_event(hEvent);
}

namespace {

CUresult record_default(simcuda::DefaultStream null_means, CUevent hEvent, CUstream hStream) {
  return record(null_means, hEvent, hStream, CU_EVENT_RECORD_DEFAULT);
}

}  // namespace

SIMCUDA_DEFAULT_STREAM_EXPORTS(cuEventRecord, cuEventRecord_ptsz, record_default,
                               (CUevent hEvent, CUstream hStream), hEvent, hStream)
SIMCUDA_DEFAULT_STREAM_EXPORTS(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz, record,
                               (CUevent hEvent, CUstream hStream, unsigned int flags), hEvent,
                               hStream, flags)

SIMCUDA_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  SIMCUDA_ENTER("cuEventQuery");
  return query(hEvent);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  SIMCUDA_ENTER("cuEventSynchronize");
  return synchronize(hEvent);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart,
                                                   CUevent hEnd) {
  SIMCUDA_ENTER("cuEventElapsedTime");
  return elapsed_time(pMilliseconds, hStart, hEnd);
}

SIMCUDA_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart,
                                                      CUevent hEnd) {
  SIMCUDA_ENTER("cuEventElapsedTime_v2");
  return elapsed_time(pMilliseconds, hStart, hEnd);
}
