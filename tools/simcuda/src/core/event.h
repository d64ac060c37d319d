// Events: markers of "everything a stream had queued when the event was recorded".
//
// Timing is modeled: a record stores the recording stream's modeled clock at the moment the
// record runs (the modeled finish of everything before it on that stream, and of everything it
// waited for), and cuEventElapsedTime reports the difference of two such clocks. It is the cost
// model's time (bytes over the configured bandwidths), never the host's wall-clock time.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "core/stream.h"

namespace simcuda {

struct Context;

struct EventRecord {
  StreamPoint point;        // the record's place on its stream
  uint64_t capture_id = 0;  // non-zero: recorded inside a capture, `point` unused
  // Written by the record when it runs; read once `point` is reached.
  std::shared_ptr<std::atomic<double>> modeled_time;
};

struct Event {
  Event(Context* context_, unsigned int flags_) : context(context_), flags(flags_) {}

  Context* const context;
  const unsigned int flags;

  std::optional<EventRecord> last_record() const;
  void set_record(EventRecord record);
  bool timing_disabled() const { return (flags & CU_EVENT_DISABLE_TIMING) != 0; }

 private:
  mutable std::mutex mutex_;
  std::optional<EventRecord> record_;  // none before the first cuEventRecord
};

// CUDA_ERROR_INVALID_VALUE for flags the driver does not accept.
CUresult create_event(Context* context, unsigned int flags, CUevent* handle);
// nullptr for a handle that is not a live event.
std::shared_ptr<Event> event_from_handle(CUevent handle);
CUresult destroy_event(CUevent handle);
// The context is being destroyed, and its events with it.
void forget_context_events(Context* context);

}  // namespace simcuda
