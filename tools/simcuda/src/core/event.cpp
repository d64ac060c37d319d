#include "core/event.h"

#include "core/handle_table.h"

namespace simcuda {
namespace {

constexpr unsigned int kEventFlags =
    CU_EVENT_DEFAULT | CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

std::mutex events_mutex;
HandleTable<Event>& events() {
  static auto* live = new HandleTable<Event>();  // outlives exit
  return *live;
}

}  // namespace

std::optional<EventRecord> Event::last_record() const {
  std::lock_guard lock(mutex_);
  return record_;
}

void Event::set_record(EventRecord record) {
  std::lock_guard lock(mutex_);
  record_ = std::move(record);
}

CUresult create_event(Context* context, unsigned int flags, CUevent* handle) {
  if ((flags & ~kEventFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  // An interprocess event cannot carry timing, as documented for cuEventCreate.
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  auto event = std::make_shared<Event>(context, flags);
  *handle = reinterpret_cast<CUevent>(event.get());
  std::lock_guard lock(events_mutex);
  events().emplace(event.get(), std::move(event));
  return CUDA_SUCCESS;
}

std::shared_ptr<Event> event_from_handle(CUevent handle) {
  std::lock_guard lock(events_mutex);
  return find_handle(events(), handle);
}

CUresult destroy_event(CUevent handle) {
  std::lock_guard lock(events_mutex);
  // Pending records keep their own state alive, so destroying before completion is fine.
  return events().erase(reinterpret_cast<Event*>(handle)) == 1 ? CUDA_SUCCESS
                                                               : CUDA_ERROR_INVALID_HANDLE;
}

void forget_context_events(Context* context) {
  std::lock_guard lock(events_mutex);
  std::erase_if(events(), [&](const auto& entry) { return entry.second->context == context; });
}

}  // namespace simcuda
